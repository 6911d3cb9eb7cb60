// The network namespace: only `lo`, brought up. No other interface, no route: zero egress.
#pragma once

#include "policy/base/result.h"

namespace cordon::launcher {

// Child side (needs CAP_NET_ADMIN in the namespace's user namespace).
Status bring_up_loopback_in_child();

}  // namespace cordon::launcher
