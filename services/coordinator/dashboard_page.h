// The dashboard's one page (HTML, CSS and the script that draws it from
// /api/status and /api/history), served by dashboard.cc.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_PAGE_H_
#define TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_PAGE_H_

namespace tributary::coordinator {

extern const char kDashboardHtml[];

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_PAGE_H_
