// The container and pod settings that fix a sandbox step a container refuses: one text each,
// said by `cordon run` when the step fails and by `cordon doctor` as the row's FIX.
#pragma once

namespace cordon::launcher {

// mount("proc") refused while parts of the container's /proc are masked by mounts over them.
inline constexpr const char* kProcMaskedFix =
    "the container's /proc is masked (paths mounted over it): Kubernetes: "
    "securityContext.procMount: Unmasked (with spec.hostUsers: false); podman: --security-opt "
    "unmask=ALL; docker: --security-opt systempaths=unconfined";

// sethostname refused by a container runtime's default seccomp profile (podman's, docker's).
inline constexpr const char* kHostnameSeccompFix =
    "a container's seccomp profile refuses sethostname (podman's default does): podman run "
    "--security-opt seccomp=unconfined or a profile allowing sethostname (cordon's: "
    "deploy/seccomp/cordon.json); Kubernetes: securityContext.seccompProfile.type: Unconfined or "
    "a Localhost profile allowing it";

}  // namespace cordon::launcher
