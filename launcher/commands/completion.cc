// Shell completion scripts generated from the CLI11 definition main.cc builds, so a new
// subcommand or option completes without anyone editing a script.
#include "launcher/commands/completion.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "launcher/diagnostics.h"
#include "launcher/run_options.h"

namespace cordon::launcher {
namespace {

// What a value or a positional is, from the name main.cc gives it (type_name or positional name).
std::string kind_of(const std::string& name) {
  if (name == "FILE" || name == "PATH") {
    return "file";
  }
  if (name == "DIR") {
    return "dir";
  }
  if (name == "ID") {
    return "id";
  }
  return "word";
}

struct Opt {
  std::vector<std::string> names;  // "--policy", "-p"
  std::string desc;
  std::string value;  // "" for a flag, else kind_of() its value
};

struct Cmd {
  std::string path;  // "" for cordon itself, "run", "policy check"
  std::vector<std::pair<std::string, std::string>> subs;  // visible subcommands, description
  std::vector<Opt> opts;
  std::vector<std::string> positionals;  // kind of each, in order
  bool last_repeats = false;             // the last positional takes any number of words
  bool program = false;                  // options, then a program and its arguments (`run`)
};

bool hidden(const std::string& group) { return group.empty(); }

void collect(const CLI::App& app, const std::string& path, std::vector<Cmd>& out) {
  Cmd c;
  c.path = path;
  // `run`'s program is cut off before CLI11 parses (main.cc): CLI11 knows no positional there.
  c.program = path == "run";
  for (const CLI::Option* o : app.get_options()) {
    if (hidden(o->get_group())) {
      continue;
    }
    if (o->get_positional() && !o->nonpositional()) {
      c.positionals.push_back(kind_of(o->get_single_name()));
      c.last_repeats = o->get_items_expected_max() > 1;
      continue;
    }
    Opt opt;
    for (const auto& l : o->get_lnames()) {
      opt.names.push_back("--" + l);
    }
    for (const auto& s : o->get_snames()) {
      opt.names.push_back("-" + s);
    }
    opt.desc = o->get_description();
    if (o->get_type_size_max() > 0 && o->get_expected_max() > 0) {
      opt.value = kind_of(o->get_type_name());
    }
    c.opts.push_back(std::move(opt));
  }
  std::vector<const CLI::App*> subs =
      app.get_subcommands([](const CLI::App* s) { return !hidden(s->get_group()); });
  for (const CLI::App* s : subs) {
    c.subs.emplace_back(s->get_name(), s->get_description());
  }
  out.push_back(std::move(c));
  for (const CLI::App* s : subs) {
    collect(*s, path.empty() ? s->get_name() : path + " " + s->get_name(), out);
  }
}

// `s` inside single quotes, for sh and fish alike: ' closes, an escaped one, and reopens. Fish
// reads \' inside quotes too, so its backslashes are doubled there.
std::string single_quoted(const std::string& s, bool fish = false) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += fish ? "\\'" : "'\\''";
    } else if (c == '\\' && fish) {
      q += "\\\\";
    } else {
      q += c == '\n' ? ' ' : c;
    }
  }
  return q + "'";
}

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

// The tables bash and zsh share: shell functions keyed by the command's path.
std::string sh_tables(const std::vector<Cmd>& cmds) {
  std::string subs, opts, values, positionals, described_subs, described_opts;
  for (const Cmd& c : cmds) {
    std::string key = single_quoted(c.path);
    if (!c.subs.empty()) {
      std::string names, lines;
      for (const auto& [name, desc] : c.subs) {
        names += (names.empty() ? "" : " ") + name;
        lines += " " + single_quoted(name + ":" + first_line(desc));
      }
      subs += "    " + key + ") echo " + single_quoted(names) + " ;;\n";
      described_subs += "    " + key + ") printf '%s\\n'" + lines + " ;;\n";
    }
    std::string names, lines;
    for (const Opt& o : c.opts) {
      for (const auto& n : o.names) {
        names += (names.empty() ? "" : " ") + n;
        lines += " " + single_quoted(n + ":" + first_line(o.desc));
        if (!o.value.empty()) {
          values += "    " + single_quoted(c.path + " " + n) + ") echo " + o.value + " ;;\n";
        }
      }
    }
    opts += "    " + key + ") echo " + single_quoted(names) + " ;;\n";
    described_opts += "    " + key + ") printf '%s\\n'" + lines + " ;;\n";
    for (size_t i = 0; i < c.positionals.size(); ++i) {
      positionals += "    " + single_quoted(c.path + " " + std::to_string(i)) + ") echo " +
                     c.positionals[i] + " ;;\n";
    }
    if (c.last_repeats) {
      positionals +=
          "    " + single_quoted(c.path + " ") + "*) echo " + c.positionals.back() + " ;;\n";
    }
  }
  std::string programs;
  for (const Cmd& c : cmds) {
    if (c.program) {
      programs += (programs.empty() ? "" : "|") + single_quoted(c.path);
    }
  }
  return "# The subcommands of command $1 (\"\" is cordon itself, then \"run\", \"policy "
         "check\").\n"
         "_cordon_subs() {\n  case $1 in\n" +
         subs + "  esac\n}\n_cordon_subs_described() {\n  case $1 in\n" + described_subs +
         "  esac\n}\n# Its options.\n_cordon_opts() {\n  case $1 in\n" + opts +
         "  esac\n}\n_cordon_opts_described() {\n  case $1 in\n" + described_opts +
         "  esac\n}\n"
         "# What option $2 of command $1 takes: file, dir, id or word; nothing for a flag.\n"
         "_cordon_value() {\n  case \"$1 $2\" in\n" +
         values +
         "  esac\n}\n# What positional $2 (from 0) of command $1 is.\n"
         "_cordon_positional() {\n  case \"$1 $2\" in\n" +
         positionals +
         "  esac\n}\n# Whether command $1 runs a program after its options.\n"
         "_cordon_program() {\n  case $1 in\n    " +
         (programs.empty() ? "''" : programs) +
         ") [ -n \"$1\" ] ;;\n    *) return 1 ;;\n  esac\n}\n";
}

// The scan both drivers run over the words before the cursor ($2 words from index $1, from
// the array $3): the command path, positionals seen, whether the word under the cursor is an
// option's value, and where a program starts. Written once for both shells' arrays.
std::string sh_scan(const std::string& words, const std::string& first, const std::string& cword) {
  return "  local cmd='' npos=0 skip=0 i w\n"
         "  for ((i = " +
         first + "; i < " + cword +
         "; i++)); do\n"
         "    w=${" +
         words +
         "[i]}\n"
         "    if ((skip)); then skip=0; continue; fi\n"
         "    if _cordon_program \"$cmd\" && [[ $w == -- || $w != -* ]]; then\n"
         "      [[ $w == -- ]] && ((i++))\n"
         "      _cordon_run_program \"$i\"\n"
         "      return\n"
         "    fi\n"
         "    case $w in\n"
         "      -*=*) ;;\n"
         "      -*) [[ -n $(_cordon_value \"$cmd\" \"$w\") ]] && skip=1 ;;\n"
         "      *) if [[ \" $(_cordon_subs \"$cmd\") \" == *\" $w \"* ]]; then\n"
         "           cmd=${cmd:+$cmd }$w npos=0\n"
         "         else\n"
         "           ((npos++))\n"
         "         fi ;;\n"
         "    esac\n"
         "  done\n";
}

std::string bash_script(const std::vector<Cmd>& cmds) {
  return "# bash completion for cordon; generated by `cordon completion bash` from its command\n"
         "# line definition.\n" +
         sh_tables(cmds) +
         "# The program and its arguments from word $1 on: bash-completion completes them as a\n"
         "# command line of their own.\n"
         "_cordon_run_program() {\n"
         "  if ((COMP_CWORD > $1)) && declare -F _command_offset >/dev/null; then\n"
         "    _command_offset \"$1\"\n"
         "  elif ((COMP_CWORD == $1)); then\n"
         "    COMPREPLY=($(compgen -c -- \"${COMP_WORDS[COMP_CWORD]}\"))\n"
         "  else\n"
         "    COMPREPLY=($(compgen -f -- \"${COMP_WORDS[COMP_CWORD]}\"))\n"
         "  fi\n"
         "}\n"
         "_cordon() {\n"
         "  local cur=${COMP_WORDS[COMP_CWORD]} kind=''\n"
         "  COMPREPLY=()\n" +
         sh_scan("COMP_WORDS", "1", "COMP_CWORD") +
         "  if ((skip)); then\n"
         "    kind=$(_cordon_value \"$cmd\" \"${COMP_WORDS[COMP_CWORD - 1]}\")\n"
         "  elif [[ $cur == -* ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$(_cordon_opts \"$cmd\")\" -- \"$cur\"))\n"
         "  elif [[ -n $(_cordon_subs \"$cmd\") ]]; then\n"
         "    COMPREPLY=($(compgen -W \"$(_cordon_subs \"$cmd\")\" -- \"$cur\"))\n"
         "  elif _cordon_program \"$cmd\"; then\n"
         "    COMPREPLY=($(compgen -c -- \"$cur\"))\n"
         "  else\n"
         "    kind=$(_cordon_positional \"$cmd\" \"$npos\")\n"
         "  fi\n"
         "  case $kind in\n"
         "    file) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
         "    dir) compopt -o filenames 2>/dev/null; COMPREPLY=($(compgen -d -- \"$cur\")) ;;\n"
         "    id) COMPREPLY=($(compgen -W \"last $(\"${COMP_WORDS[0]}\" ls --ids 2>/dev/null)\" "
         "-- \"$cur\")) ;;\n"
         "  esac\n"
         "}\n"
         "complete -F _cordon cordon\n";
}

std::string zsh_script(const std::vector<Cmd>& cmds) {
  return "#compdef cordon\n"
         "# zsh completion for cordon; generated by `cordon completion zsh` from its command\n"
         "# line definition.\n" +
         sh_tables(cmds) +
         "# The program and its arguments from word $1 on, completed as a command line.\n"
         "_cordon_run_program() {\n"
         "  words=(\"${(@)words[$1,-1]}\")\n"
         "  ((CURRENT -= $1 - 1))\n"
         "  _normal\n"
         "}\n"
         "_cordon() {\n"
         "  local cur=${words[CURRENT]} kind=''\n"
         "  local -a reply\n" +
         sh_scan("words", "2", "CURRENT") +
         "  if ((skip)); then\n"
         "    kind=$(_cordon_value \"$cmd\" \"${words[CURRENT - 1]}\")\n"
         "  elif [[ $cur == -* ]]; then\n"
         "    reply=(${(f)\"$(_cordon_opts_described \"$cmd\")\"})\n"
         "    _describe option reply\n"
         "    return\n"
         "  elif [[ -n $(_cordon_subs \"$cmd\") ]]; then\n"
         "    reply=(${(f)\"$(_cordon_subs_described \"$cmd\")\"})\n"
         "    _describe command reply\n"
         "    return\n"
         "  elif _cordon_program \"$cmd\"; then\n"
         "    _command_names -e\n"
         "    return\n"
         "  else\n"
         "    kind=$(_cordon_positional \"$cmd\" \"$npos\")\n"
         "  fi\n"
         "  case $kind in\n"
         "    file) _files ;;\n"
         "    dir) _files -/ ;;\n"
         "    id) reply=(last ${(f)\"$(${words[1]} ls --ids 2>/dev/null)\"}); compadd -a reply ;;\n"
         "  esac\n"
         "}\n"
         "_cordon \"$@\"\n";
}

// Fish's condition that the command line is inside command `c` and not in a subcommand of it.
std::string fish_condition(const Cmd& c) {
  if (c.path.empty()) {
    return "__fish_use_subcommand";
  }
  std::string cond;
  std::string rest = c.path;
  for (size_t at; !rest.empty(); rest = at == std::string::npos ? "" : rest.substr(at + 1)) {
    at = rest.find(' ');
    cond += (cond.empty() ? "" : "; and ") + std::string("__fish_seen_subcommand_from ") +
            rest.substr(0, at);
  }
  if (!c.subs.empty()) {
    cond += "; and not __fish_seen_subcommand_from";
    for (const auto& s : c.subs) {
      cond += " " + s.first;
    }
  }
  return cond;
}

std::string fish_value(const std::string& kind) {
  if (kind == "file") {
    return " -r -F";
  }
  if (kind == "dir") {
    return " -r -f -a '(__fish_complete_directories (commandline -ct))'";
  }
  if (kind == "id") {
    return " -r -f -a '(__cordon_ids)'";
  }
  return " -r -f";
}

std::string fish_script(const std::vector<Cmd>& cmds) {
  std::string out =
      "# fish completion for cordon; generated by `cordon completion fish` from its command\n"
      "# line definition.\n"
      "function __cordon_ids --description 'cordon session ids'\n"
      "    echo last\n"
      "    set -l cordon (commandline -opc)[1]\n"
      "    $cordon ls --ids 2>/dev/null\n"
      "end\n"
      "function __cordon_words_after --description 'non-option words after the last $argv[1]'\n"
      "    set -l words (commandline -opc)\n"
      "    set -l n 0\n"
      "    for w in $words\n"
      "        string match -q -- '-*' $w; or set n (math $n + 1)\n"
      "        test \"$w\" = $argv[1]; and set n 0\n"
      "    end\n"
      "    echo $n\n"
      "end\n"
      "complete -c cordon -f\n";
  for (const Cmd& c : cmds) {
    std::string cond = single_quoted(fish_condition(c), true);
    for (const auto& [name, desc] : c.subs) {
      out += "complete -c cordon -n " + cond + " -a " + name + " -d " +
             single_quoted(first_line(desc), true) + "\n";
    }
    for (const Opt& o : c.opts) {
      out += "complete -c cordon -n " + cond;
      for (const auto& n : o.names) {
        out += n.rfind("--", 0) == 0 ? " -l " + n.substr(2) : " -s " + n.substr(1);
      }
      out += (o.value.empty() ? "" : fish_value(o.value)) + " -d " +
             single_quoted(first_line(o.desc), true) + "\n";
    }
    // Each positional where it stands: the non-option words after the command's own name (no
    // such command has an option that takes a value, which would count as one).
    std::string last = c.path.substr(c.path.rfind(' ') + 1);
    for (size_t i = 0; i < c.positionals.size(); ++i) {
      const std::string& p = c.positionals[i];
      if (p != "file" && p != "id") {
        continue;
      }
      bool repeats = c.last_repeats && i + 1 == c.positionals.size();
      std::string at = fish_condition(c) + "; and test (__cordon_words_after " + last + ") " +
                       (repeats ? "-ge " : "-eq ") + std::to_string(i);
      out += "complete -c cordon -n " + single_quoted(at, true) +
             (p == "file" ? std::string(" -F") : std::string(" -f -a '(__cordon_ids)'")) + "\n";
    }
    if (c.program) {
      out += "complete -c cordon -n " + cond + " -F -a '(__fish_complete_command)'\n";
    }
  }
  return out;
}

}  // namespace

std::string completion_script(const CLI::App& app, const std::string& shell) {
  std::vector<Cmd> cmds;
  collect(app, "", cmds);
  if (shell == "bash") {
    return bash_script(cmds);
  }
  if (shell == "zsh") {
    return zsh_script(cmds);
  }
  if (shell == "fish") {
    return fish_script(cmds);
  }
  return "";
}

int completion_command(const CLI::App& app, const std::string& shell) {
  std::string script = completion_script(app, shell);
  if (script.empty()) {
    return fail_in("completion", shell + ": no such shell; use bash, zsh or fish");
  }
  std::fwrite(script.data(), 1, script.size(), stdout);
  return 0;
}

}  // namespace cordon::launcher
