#include "common/thread_name.h"

#include <pthread.h>

#include <algorithm>

namespace tributary {

void NameThisThread(absl::string_view name) {
  std::string cut(name.substr(0, kMaxThreadNameBytes));
  std::replace(cut.begin(), cut.end(), '\0', '?');  // The kernel ends a name at a NUL.
  pthread_setname_np(pthread_self(), cut.c_str());
}

std::string ThisThreadName() {
  char buffer[kMaxThreadNameBytes + 1] = {};
  if (pthread_getname_np(pthread_self(), buffer, sizeof(buffer)) != 0) return "";
  return buffer;
}

}  // namespace tributary
