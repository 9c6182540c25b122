// The dashboard's browser headers: a Content-Security-Policy that allows exactly the
// page's own inline script and style (by hash) and nothing inline besides, and
// X-Content-Type-Options: nosniff on every HTTP answer. (Rendering under that policy
// in a real browser: tests/coordinator:dashboard_chromium_test.)
#include "services/coordinator/dashboard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <regex>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "common/sha256.h"

namespace tributary::coordinator {
namespace {

using ::testing::HasSubstr;

std::string HashOf(const std::string& text) {
  const std::string digest = absl::HexStringToBytes(Sha256Hex(text));
  return absl::StrCat("'sha256-", absl::Base64Escape(digest), "'");
}

std::string Between(const std::string& html, const std::string& open, const std::string& close) {
  const size_t start = html.find(open) + open.size();
  return html.substr(start, html.find(close, start) - start);
}

TEST(DashboardTest, ThePolicyAllowsOnlyThePagesOwnInlineCode) {
  const std::string& html = DashboardHtml();
  const std::string& policy = DashboardContentSecurityPolicy();
  EXPECT_THAT(policy, HasSubstr("default-src 'none'"));
  EXPECT_THAT(policy, HasSubstr("script-src " + HashOf(Between(html, "<script>", "</script>"))));
  EXPECT_THAT(policy, HasSubstr("style-src " + HashOf(Between(html, "<style>", "</style>"))));
  EXPECT_THAT(policy, HasSubstr("connect-src 'self'"));
  EXPECT_THAT(policy, HasSubstr("frame-ancestors 'none'"));
  EXPECT_THAT(policy, ::testing::Not(HasSubstr("unsafe-inline")));
  // One script and one style block, and nothing the policy would block: no style
  // attributes, no inline event handlers, no javascript: URLs.
  EXPECT_EQ(html.find("<script", html.find("<script") + 1), std::string::npos);
  EXPECT_EQ(html.find("<style", html.find("<style") + 1), std::string::npos);
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(style\s*=\s*["'])"))) << "style attribute";
  EXPECT_FALSE(std::regex_search(html, std::regex(R"(\son[a-z]+\s*=)"))) << "event handler";
  EXPECT_EQ(html.find("javascript:"), std::string::npos);
}

TEST(DashboardTest, EveryAnswerCarriesTheBrowserHeaders) {
  HttpServer http(std::make_shared<prometheus::Registry>(), [] { return true; });
  DashboardData data;
  data.status = [] { return v1::ClusterStatus(); };
  AddDashboardRoutes(http, data);
  ASSERT_TRUE(http.Start("127.0.0.1", 0).ok());
  httplib::Client client("127.0.0.1", http.port());
  auto page = client.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_EQ(page->get_header_value("Content-Security-Policy"), DashboardContentSecurityPolicy());
  EXPECT_EQ(page->get_header_value("X-Content-Type-Options"), "nosniff");
  for (const char* path : {"/api/v1/status", "/api/v1/jobs", "/api/v1/jobs/job-1-0000",
                           "/api/v1/jobs/job-1-0000/history", "/metrics", "/healthz",
                           "/no-such-page"}) {
    auto answer = client.Get(path);
    ASSERT_TRUE(answer) << path;
    EXPECT_EQ(answer->get_header_value("X-Content-Type-Options"), "nosniff") << path;
  }
  http.Stop();
}

}  // namespace
}  // namespace tributary::coordinator
