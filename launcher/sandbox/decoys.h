// The canaries' decoy files in the sandbox (canaries.h makes them): written by the child into
// the home's own tmpfs once the root is composed, so each is an ordinary file of the sandbox's
// user, with no mount, host path or variable that could tell the program it is a decoy.
#pragma once

#include "base/result.h"
#include "launcher/plan.h"

namespace cordon::launcher {

// Child side, after compose_root_in_child: writes each of plan.decoys at its target (0600, its
// new parents 0755, ~/.ssh 0700), watches each for opens with one inotify instance, and sends
// cordon MsgKind::Decoys: that instance and "WD DEV INO" per decoy, in plan order. The program
// starts only after cordon has read it (run.cc releases the child then), so none of its opens
// goes unmatched. Nothing to do without decoys.
Status plant_decoys_in_child(const LaunchPlan& plan, int report_fd);

}  // namespace cordon::launcher
