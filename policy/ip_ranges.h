// Private to policy/: whether a whole network lies inside the special (never-an-upstream) ranges.
#pragma once

#include "policy/host_pattern.h"

namespace cordon::policy {

// True when every address of `net` is special: `net` sits inside one special block (10.0.0.0/8,
// 127.0.0.0/8, fe80::/10, ...). "10.1.0.0/16" and "127.0.0.1" are; "0.0.0.0/0" and "::/0" are not.
bool net_within_special(const IpNet& net);

}  // namespace cordon::policy
