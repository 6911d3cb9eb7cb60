// Making and planting the session's decoy secrets (see canaries.h).
#include "launcher/canaries.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "base/unique_fd.h"
#include "preload_shim/wire.h"

namespace cordon::launcher {
namespace {

constexpr std::string_view kUpperDigits = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
constexpr std::string_view kAlnum =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
constexpr std::string_view kAwsSecret =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/+";

// `n` characters drawn uniformly from `alphabet` (rejection keeps the modulo unbiased).
std::string random_of(std::string_view alphabet, size_t n) {
  std::string out;
  const unsigned limit = 256 - 256 % alphabet.size();
  while (out.size() < n) {
    unsigned char buf[64];
    if (::getrandom(buf, sizeof buf, 0) != static_cast<ssize_t>(sizeof buf)) {
      continue;  // only interrupted by a signal before the pool is ready; try again
    }
    for (unsigned char b : buf) {
      if (b < limit && out.size() < n) {
        out.push_back(alphabet[b % alphabet.size()]);
      }
    }
  }
  return out;
}

void put_u32(std::string& b, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    b.push_back(static_cast<char>((v >> shift) & 0xff));
  }
}

void put_string(std::string& b, std::string_view s) {
  put_u32(b, static_cast<uint32_t>(s.size()));
  b.append(s);
}

std::string base64(std::string_view raw) {
  std::string out(4 * ((raw.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(raw.data()),
                                static_cast<int>(raw.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

constexpr size_t kSshLine = 70;  // ssh-keygen's line width for the key's base64

// What a request must not carry of a decoy key file: its second base64 line, the first that is
// the key's own (the first is the format's fixed preamble).
std::string ssh_key_marker(const std::string& pem) {
  const size_t first = pem.find('\n');
  const size_t second = pem.find('\n', first + 1);
  return pem.substr(second + 1, kSshLine);
}

// The mount of the plan that already shows `target`, other than the home's own empty tmpfs:
// a grant beneath the home, or the workspace when it is the home itself. A decoy there would
// hide the real file, or put its mount point into the workspace.
const MountOp* shown_by_grant(const LaunchPlan& plan, const std::string& target) {
  for (const auto& op : plan.mounts) {
    const bool home_tmpfs = op.kind == MountKind::Tmpfs && op.target == plan.home;
    if (!home_tmpfs && op.target.size() >= plan.home.size() && is_under(target, op.target)) {
      return &op;
    }
  }
  return nullptr;
}

bool env_has(const LaunchPlan& plan, const std::string& name) {
  return std::any_of(plan.envp.begin(), plan.envp.end(),
                     [&](const std::string& kv) { return kv.starts_with(name + "="); });
}

struct Planter {
  LaunchPlan& plan;
  PlantedCanaries& out;

  // Sets `name` in the sandbox's environment unless the host passes a real one.
  bool env(const std::string& name, const std::string& value) {
    if (env_has(plan, name)) {
      out.notes.push_back("canaries: " + name +
                          " not planted: the program gets the one cordon passes on");
      return false;
    }
    plan.envp.push_back(name + "=" + value);
    return true;
  }

  // Plans the decoy file for `canary` at `~/rel`; false when it is not planted.
  Result<bool> file(const std::string& canary, const std::string& rel, const std::string& content) {
    if (plan.home.empty() || plan.home == "/") {
      out.notes.push_back("canaries: ~/" + rel + " not planted: the sandbox has no home");
      return false;
    }
    const std::string base = rel.substr(rel.rfind('/') + 1);
    if (std::none_of(std::begin(preload_shim::wire::kDecoyNames),
                     std::end(preload_shim::wire::kDecoyNames),
                     [&](const char* n) { return base == n; })) {
      // The shim reports opens of these names only: a decoy by any other would go unattributed.
      return make_error("canary file ~/" + rel + " is not named in wire::kDecoyNames");
    }
    const std::string target = plan.home + "/" + rel;
    if (const MountOp* op = shown_by_grant(plan, target)) {
      out.notes.push_back("canaries: ~/" + rel + " not planted: the real " + op->target +
                          " the policy grants is shown there");
      return false;
    }
    plan.decoys.push_back({canary, target, content});
    return true;
  }

  void value(const std::string& canary, const std::string& v) {
    out.handover.push_back({{"canary", canary}, {"value", v}});
  }
};

}  // namespace

std::string make_aws_key_id() { return "AKIA" + random_of(kUpperDigits, 16); }
std::string make_aws_secret() { return random_of(kAwsSecret, 40); }
std::string make_github_token() { return "ghp_" + random_of(kAlnum, 36); }

Result<std::string> make_ssh_key() {
  std::unique_ptr<EVP_PKEY, decltype(&EVP_PKEY_free)> key(
      EVP_PKEY_Q_keygen(nullptr, nullptr, "ED25519"), EVP_PKEY_free);
  std::string seed(32, '\0'), pub(32, '\0');
  size_t seed_len = seed.size(), pub_len = pub.size();
  if (!key ||
      EVP_PKEY_get_raw_private_key(key.get(), reinterpret_cast<unsigned char*>(seed.data()),
                                   &seed_len) != 1 ||
      EVP_PKEY_get_raw_public_key(key.get(), reinterpret_cast<unsigned char*>(pub.data()),
                                  &pub_len) != 1 ||
      seed_len != 32 || pub_len != 32) {
    return make_error("OpenSSL could not make an Ed25519 key for the ssh canary");
  }
  std::string pub_blob;
  put_string(pub_blob, "ssh-ed25519");
  put_string(pub_blob, pub);
  std::string priv;
  const std::string check = random_of(kAlnum, 4);  // the two equal check words
  priv += check + check;
  put_string(priv, "ssh-ed25519");
  put_string(priv, pub);
  put_string(priv, seed + pub);
  put_string(priv, "deploy@build-01");
  for (char pad = 1; priv.size() % 8 != 0; ++pad) {
    priv.push_back(pad);
  }
  std::string blob("openssh-key-v1", 15);  // with its NUL
  put_string(blob, "none");                // cipher
  put_string(blob, "none");                // kdf
  put_string(blob, "");                    // kdf options
  put_u32(blob, 1);
  put_string(blob, pub_blob);
  put_string(blob, priv);
  const std::string b64 = base64(blob);
  std::string pem = "-----BEGIN OPENSSH PRIVATE KEY-----\n";
  for (size_t i = 0; i < b64.size(); i += kSshLine) {
    pem += b64.substr(i, kSshLine) + "\n";
  }
  return pem + "-----END OPENSSH PRIVATE KEY-----\n";
}

Result<PlantedCanaries> plant_canaries(const policy::Policy& p, LaunchPlan& plan) {
  PlantedCanaries out;
  Planter put{plan, out};
  for (const auto& name : p.canaries) {
    std::vector<std::string> where;
    if (name == "aws") {
      const std::string id = make_aws_key_id(), secret = make_aws_secret();
      // One pair: half a pair in the environment would look planted.
      if (!env_has(plan, "AWS_ACCESS_KEY_ID") && !env_has(plan, "AWS_SECRET_ACCESS_KEY")) {
        put.env("AWS_ACCESS_KEY_ID", id);
        put.env("AWS_SECRET_ACCESS_KEY", secret);
        where.push_back("AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY");
      } else {
        out.notes.push_back(
            "canaries: AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY not planted: the program gets the "
            "ones cordon passes on");
      }
      ASSIGN_OR_RETURN(bool f, put.file(name, ".aws/credentials",
                                        "[default]\naws_access_key_id = " + id +
                                            "\naws_secret_access_key = " + secret + "\n"));
      if (f) {
        where.push_back("~/.aws/credentials");
      }
      put.value(name, id);
      put.value(name, secret);
    } else if (name == "ssh") {
      ASSIGN_OR_RETURN(std::string pem, make_ssh_key());
      ASSIGN_OR_RETURN(bool f, put.file(name, ".ssh/id_ed25519", pem));
      if (f) {
        where.push_back("~/.ssh/id_ed25519");
      }
      put.value(name, ssh_key_marker(pem));
    } else if (name == "dotenv") {
      const std::string key = "sk-proj-" + random_of(kAlnum, 48);
      ASSIGN_OR_RETURN(bool f, put.file(name, ".env", "OPENAI_API_KEY=" + key + "\n"));
      if (f) {
        where.push_back("~/.env");
      }
      put.value(name, key);
    } else if (name == "github") {
      const std::string token = make_github_token();
      if (put.env("GITHUB_TOKEN", token)) {
        where.push_back("GITHUB_TOKEN");
      }
      put.value(name, token);
    }
    if (!where.empty()) {
      std::string w;
      for (const auto& x : where) {
        w += (w.empty() ? "" : ", ") + x;
      }
      out.planted.push_back(name + " (" + w + ")");
    }
  }
  return out;
}

}  // namespace cordon::launcher
