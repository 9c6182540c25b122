#include "services/coordinator/dashboard.h"

#include <google/protobuf/util/json_util.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"
#include "services/coordinator/dashboard_page.h"

namespace tributary::coordinator {

const std::string& DashboardHtml() {
  static const std::string* html = new std::string(kDashboardHtml);
  return *html;
}

namespace {

// 'sha256-<base64>' of the text between `open` and `close` in the page.
std::string InlineHash(const std::string& html, const std::string& open,
                       const std::string& close) {
  const size_t start = html.find(open);
  const size_t end = html.find(close, start);
  if (start == std::string::npos || end == std::string::npos) return "'none'";
  const std::string body = html.substr(start + open.size(), end - start - open.size());
  const std::string digest = absl::HexStringToBytes(Sha256Hex(body));
  return absl::StrCat("'sha256-", absl::Base64Escape(digest), "'");
}

}  // namespace

const std::string& DashboardContentSecurityPolicy() {
  static const std::string* policy = new std::string(absl::StrCat(
      "default-src 'none'; script-src ", InlineHash(DashboardHtml(), "<script>", "</script>"),
      "; style-src ", InlineHash(DashboardHtml(), "<style>", "</style>"),
      "; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
      "frame-ancestors 'none'"));
  return *policy;
}

absl::StatusOr<std::string> ApiJson(const google::protobuf::Message& message) {
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string json;
  const auto printed = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!printed.ok()) {
    return absl::InternalError(absl::StrCat("cannot write the ", message.GetDescriptor()->name(),
                                            " as JSON: ", printed.ToString()));
  }
  return json;
}

namespace {

void Reply(httplib::Response& response, const absl::StatusOr<std::string>& json) {
  response.set_header("Cache-Control", "no-store");
  if (json.ok()) {
    response.set_content(*json, "application/json");
    return;
  }
  response.status = absl::IsNotFound(json.status())          ? 404
                    : absl::IsInvalidArgument(json.status()) ? 400
                                                             : 500;
  response.set_content(std::string(json.status().message()) + "\n", "text/plain; charset=utf-8");
}

template <typename Message>
absl::StatusOr<std::string> JsonOf(const absl::StatusOr<Message>& message) {
  if (!message.ok()) return message.status();
  return ApiJson(*message);
}

// The job ids a route takes: what the coordinator makes ("job-3-1f2e"), and no more.
constexpr char kJobIdPattern[] = "([A-Za-z0-9._-]{1,128})";

absl::Status Unserved(const char* what) {
  return absl::UnimplementedError(absl::StrCat("this server does not serve ", what));
}

}  // namespace

DashboardData DashboardDataOf(CoordinatorHandler& handler) {
  DashboardData data;
  // The handlers answer at once (under the coordinator's lock); only RegisterWorker and
  // WaitRendezvous answer later.
  data.status = [&handler] {
    v1::ClusterStatus status;
    handler.HandleGetClusterStatus(v1::GetClusterStatusRequest(), &status, [](absl::Status) {});
    return status;
  };
  data.jobs = [&handler] {
    v1::ListJobsResponse jobs;
    handler.HandleListJobs(v1::ListJobsRequest(), &jobs, [](absl::Status) {});
    return jobs;
  };
  data.job = [&handler](const std::string& job_id) -> absl::StatusOr<v1::Job> {
    v1::GetJobRequest request;
    request.set_job_id(job_id);
    v1::Job job;
    absl::Status status;
    handler.HandleGetJob(request, &job, [&status](absl::Status s) { status = std::move(s); });
    if (!status.ok()) return status;
    return job;
  };
  data.history = [&handler](const std::string& job_id) -> absl::StatusOr<v1::JobHistory> {
    v1::GetJobHistoryRequest request;
    request.set_job_id(job_id);
    v1::JobHistory history;
    absl::Status status;
    handler.HandleGetJobHistory(request, &history,
                                [&status](absl::Status s) { status = std::move(s); });
    if (!status.ok()) return status;
    return history;
  };
  return data;
}

void AddDashboardRoutes(HttpServer& http, DashboardData data) {
  const auto page = [](const httplib::Request&, httplib::Response& response) {
    response.set_header("Cache-Control", "no-store");
    response.set_header("Content-Security-Policy", DashboardContentSecurityPolicy());
    response.set_content(DashboardHtml(), "text/html; charset=utf-8");
  };
  http.Get("/", page);
  http.Get("/index.html", page);
  http.Get("/api/v1/status",
           [status = data.status](const httplib::Request&, httplib::Response& response) {
             Reply(response, ApiJson(status()));
           });
  http.Get("/api/v1/jobs",
           [jobs = data.jobs](const httplib::Request&, httplib::Response& response) {
             if (!jobs) return Reply(response, Unserved("a job list"));
             v1::ListJobsResponse list = jobs();
             // The list is for picking a job: each job's events come with the job itself.
             for (v1::Job& job : *list.mutable_jobs()) {
               job.clear_events();
               job.clear_progress();
             }
             Reply(response, ApiJson(list));
           });
  http.Get(absl::StrCat("/api/v1/jobs/", kJobIdPattern),
           [job = data.job](const httplib::Request& request, httplib::Response& response) {
             if (!job) return Reply(response, Unserved("jobs"));
             Reply(response, JsonOf(job(request.matches[1].str())));
           });
  http.Get(absl::StrCat("/api/v1/jobs/", kJobIdPattern, "/history"),
           [history = data.history](const httplib::Request& request,
                                    httplib::Response& response) {
             if (!history) return Reply(response, Unserved("histories"));
             Reply(response, JsonOf(history(request.matches[1].str())));
           });
}

}  // namespace tributary::coordinator
