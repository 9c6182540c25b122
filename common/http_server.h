// The small HTTP side port of every service: /metrics (Prometheus text from the
// process's registry), /healthz, and whatever else a service adds (the
// coordinator's dashboard and JSON API).
#ifndef TRIBUTARY_COMMON_HTTP_SERVER_H_
#define TRIBUTARY_COMMON_HTTP_SERVER_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <prometheus/collectable.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"

namespace tributary {

class HttpServer {
 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  // serving() decides /healthz: 200 "SERVING" or 503 "NOT_SERVING".
  HttpServer(std::shared_ptr<prometheus::Registry> registry, std::function<bool()> serving);
  ~HttpServer();

  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Adds a GET handler; call before Start().
  void Get(const std::string& path, Handler handler);
  // Adds what /metrics also renders after the registry (ProcessCollector); call before
  // Start().
  void AddCollectable(std::shared_ptr<prometheus::Collectable> collectable);

  // Binds host:port (port 0 picks a free one) and serves on a background thread.
  absl::Status Start(const std::string& host, int port);
  void Stop();
  int port() const { return port_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::function<bool()> serving_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
};

// Prometheus text exposition of everything in the registry, then in `extra`.
std::string RenderMetrics(const prometheus::Registry& registry,
                          const std::vector<std::shared_ptr<prometheus::Collectable>>& extra = {});

}  // namespace tributary

#endif  // TRIBUTARY_COMMON_HTTP_SERVER_H_
