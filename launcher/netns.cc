// The network namespace: `lo` up, nothing else (the proxy's redirect comes with cordon-netproxy).
#include "launcher/netns.h"

#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "policy/base/unique_fd.h"

namespace cordon::launcher {

Status bring_up_loopback_in_child() {
  UniqueFd s(::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0));
  if (!s) {
    return sys_error("socket(AF_INET, SOCK_DGRAM) to configure lo");
  }
  ifreq ifr{};
  std::strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (::ioctl(s.get(), SIOCGIFFLAGS, &ifr) != 0) {
    return sys_error("ioctl(SIOCGIFFLAGS, \"lo\")");
  }
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (::ioctl(s.get(), SIOCSIFFLAGS, &ifr) != 0) {
    return sys_error("ioctl(SIOCSIFFLAGS, \"lo\", IFF_UP)");
  }
  return {};
}

}  // namespace cordon::launcher
