// The coordinator's HTTP face: "/" is a self-contained dashboard page (inline CSS, JS
// and SVG charts; no external assets, works offline) that polls "/api/v1/status",
// which serves the ClusterStatus message in the proto3 JSON mapping.
#ifndef TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_H_
#define TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_H_

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "common/http_server.h"
#include "proto/coordinator.pb.h"

namespace tributary::coordinator {

// Adds "/", "/index.html" and "/api/v1/status" (call before the server starts).
void AddDashboardRoutes(HttpServer& http, std::function<v1::ClusterStatus()> status);

// ClusterStatus as proto3 JSON (lowerCamelCase names, enums by name, 64-bit integers
// as strings, fields with default values included so clients see every field).
// INTERNAL when the message cannot be written (e.g. a string that is not UTF-8).
absl::StatusOr<std::string> ClusterStatusJson(const v1::ClusterStatus& status);

// The page itself.
const std::string& DashboardHtml();

// The page's Content-Security-Policy: nothing but its own inline script and style (by
// their SHA-256), requests to its own origin, and no framing.
const std::string& DashboardContentSecurityPolicy();

}  // namespace tributary::coordinator

#endif  // TRIBUTARY_SERVICES_COORDINATOR_DASHBOARD_H_
