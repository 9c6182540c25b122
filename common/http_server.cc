#include "common/http_server.h"

#include <chrono>

#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"

namespace tributary {

std::string RenderMetrics(const prometheus::Registry& registry,
                          const std::vector<std::shared_ptr<prometheus::Collectable>>& extra) {
  std::vector<prometheus::MetricFamily> families = registry.Collect();
  for (const std::shared_ptr<prometheus::Collectable>& collectable : extra) {
    std::vector<prometheus::MetricFamily> more = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()),
                    std::make_move_iterator(more.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
}

HttpServer::HttpServer(std::shared_ptr<prometheus::Registry> registry,
                       std::function<bool()> serving)
    : registry_(std::move(registry)), serving_(std::move(serving)) {
  // Every answer is exactly the type it says: browsers must not guess another.
  server_.set_default_headers({{"X-Content-Type-Options", "nosniff"}});
  server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(RenderMetrics(*registry_, collectables_), "text/plain; version=0.0.4");
  });
  server_.Get("/healthz", [this](const httplib::Request&, httplib::Response& response) {
    const bool serving = serving_();
    response.status = serving ? 200 : 503;
    response.set_content(serving ? "SERVING\n" : "NOT_SERVING\n", "text/plain");
  });
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::AddCollectable(std::shared_ptr<prometheus::Collectable> collectable) {
  collectables_.push_back(std::move(collectable));
}

void HttpServer::Get(const std::string& path, Handler handler) {
  server_.Get(path, std::move(handler));
}

absl::Status HttpServer::Start(const std::string& host, int port) {
  if (port == 0) {
    port_ = server_.bind_to_any_port(host);
  } else {
    port_ = server_.bind_to_port(host, port) ? port : -1;
  }
  if (port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot bind the HTTP port ", host, ":", port, " (in use?)"));
  }
  thread_ = std::thread([this] {
    NameThisThread("http");
    server_.listen_after_bind();
  });
  // stop() before the listen loop has started would be lost and leave the thread
  // blocked for good, so return only once it runs.
  while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  return absl::OkStatus();
}

void HttpServer::Stop() {
  if (thread_.joinable()) {
    server_.stop();
    thread_.join();
  }
}

}  // namespace tributary
