// `cordon policy default | check FILE | explain FILE`.
#include <cstdio>
#include <iostream>

#include "launcher/commands.h"
#include "policy/loader.h"
#include "policy/serialize.h"

namespace cordon::launcher {

int policy_default_command() {
  std::cout << policy::default_policy_text();
  return 0;
}

int policy_check_command(const std::string& file) {
  try {
    (void)policy::load_policy_file(file);
  } catch (const policy::PolicyError& e) {
    std::cerr << "cordon: " << e.what() << "\n";
    return 1;
  }
  std::cout << file << ": ok\n";
  return 0;
}

int policy_explain_command(const std::string& file) {
  try {
    std::cout << policy::explain(policy::load_policy_file(file));
  } catch (const policy::PolicyError& e) {
    std::cerr << "cordon: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

}  // namespace cordon::launcher
