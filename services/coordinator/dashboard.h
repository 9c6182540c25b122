// The coordinator's HTTP face: "/" is a self-contained dashboard page (inline CSS, JS
// and SVG charts; no external assets, works offline) that polls "/api/v1/status"
// (ClusterStatus), "/api/v1/jobs" (the job list), "/api/v1/jobs/<id>" (one job) and
// "/api/v1/jobs/<id>/history" (its per-step history), all in the proto3 JSON mapping.
// `tributary show` serves the same page and routes from a finished run's files.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_H_
#define TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "proto/coordinator.pb.h"
#include "services/coordinator/coordinator_handler.h"

namespace tributary::coordinator {

// Where the page's data comes from: a live coordinator, or a run's files.
struct DashboardData {
  std::function<v1::ClusterStatus()> status;
  // Every job, newest first (the page's job list; events and progress are left out).
  std::function<v1::ListJobsResponse()> jobs;
  // One job (GetJob); NOT_FOUND for an unknown id.
  std::function<absl::StatusOr<v1::Job>(const std::string& job_id)> job;
  // One job's history (GetJobHistory); NOT_FOUND for an unknown id.
  std::function<absl::StatusOr<v1::JobHistory>(const std::string& job_id)> history;
};

// The coordinator's handlers as the page's data.
DashboardData DashboardDataOf(CoordinatorHandler& handler);

// Adds "/", "/index.html", "/api/v1/status", "/api/v1/jobs", "/api/v1/jobs/<id>" and
// "/api/v1/jobs/<id>/history" (call before the server starts). An unknown job is a 404
// with the reason as text; so is an id that is not one (the routes take job ids of
// [A-Za-z0-9._-], at most 128 characters).
void AddDashboardRoutes(HttpServer& http, DashboardData data);

// A message as proto3 JSON (lowerCamelCase names, enums by name, 64-bit integers as
// strings, fields with default values included so clients see every field).
// INTERNAL when the message cannot be written (e.g. a string that is not UTF-8).
absl::StatusOr<std::string> ApiJson(const google::protobuf::Message& message);
inline absl::StatusOr<std::string> ClusterStatusJson(const v1::ClusterStatus& status) {
  return ApiJson(status);
}

// The page itself.
const std::string& DashboardHtml();

// The page's Content-Security-Policy: nothing but its own inline script and style (by
// their SHA-256), requests to its own origin, and no framing.
const std::string& DashboardContentSecurityPolicy();

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_H_
