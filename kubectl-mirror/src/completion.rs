//! Shell completion: scripts for bash and zsh (`kubectl mirror completion bash|zsh`, completing
//! the `kubectl-mirror` command), and the answers kubectl 1.26+ asks a plugin for when completing
//! `kubectl mirror …`: it runs `kubectl_complete-mirror ARGS… PARTIAL` and reads candidates, one a
//! line (`value<TAB>description`), then `:<directive>` (Cobra's protocol).

use clap::{Arg, Command, CommandFactory};

use crate::cli::{Cli, Shell};

/// Name of the program kubectl runs to complete `kubectl mirror …`.
pub const KUBECTL_COMPLETE: &str = "kubectl_complete-mirror";

/// Cobra's ShellCompDirectiveNoFileComp: no file names after the candidates.
const NO_FILE_COMPLETION: u8 = 4;

/// The completion script for `shell`.
pub fn script(shell: Shell) -> String {
    // The program's own name: clap derives the script's function names from it (the help's
    // "kubectl mirror" has a space).
    let mut command = Cli::command().bin_name("kubectl-mirror");
    let mut out = Vec::new();
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
    };
    clap_complete::generate(generator, &mut command, "kubectl-mirror", &mut out);
    let text = String::from_utf8(out).expect("completion scripts are text");
    match shell {
        // clap_complete's bash script names a subcommand's case `kubectl__subcmd__mirror__…`
        // where its dispatch sets `kubectl__mirror__…` (the '-' of the program name is
        // replaced differently): without this, only the command names complete.
        Shell::Bash => text.replace("kubectl__subcmd__mirror__", "kubectl__mirror__"),
        Shell::Zsh => text,
    }
}

fn takes_value(arg: &Arg) -> bool {
    arg.get_num_args().is_some_and(|n| n.takes_values()) && arg.get_action().takes_values()
}

fn help(arg: &Arg) -> String {
    arg.get_help()
        .map(|h| h.to_string())
        .unwrap_or_default()
        .lines()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The flag of `command` that `word` names (`--output`, `-o`, `--output=json`).
fn flag<'a>(command: &'a Command, word: &str) -> Option<&'a Arg> {
    let name = word.split('=').next().unwrap_or(word);
    command.get_arguments().find(|a| {
        name.strip_prefix("--")
            .is_some_and(|long| a.get_long() == Some(long))
            || (name.len() == 2 && name.starts_with('-') && a.get_short() == name.chars().nth(1))
    })
}

fn values(arg: &Arg, prefix: &str, partial: &str) -> Vec<String> {
    arg.get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set() && v.get_name().starts_with(partial))
        .map(|v| {
            let about = v.get_help().map(|h| h.to_string()).unwrap_or_default();
            format!("{prefix}{}\t{about}", v.get_name())
        })
        .collect()
}

/// Candidates for completing the last of `words` (the words after `kubectl mirror`; the last
/// one is what is being typed, possibly empty), in Cobra's output format.
pub fn complete(words: &[String]) -> String {
    let mut root = Cli::command();
    root.build();
    let (partial, before) = match words.split_last() {
        Some((last, rest)) => (last.as_str(), rest),
        None => ("", &[][..]),
    };
    let mut command = &root;
    let mut pending: Option<&Arg> = None;
    for word in before {
        if pending.take().is_some() {
            continue;
        }
        if word.starts_with('-') {
            if let Some(a) = flag(command, word)
                && takes_value(a)
                && !word.contains('=')
                && a.get_num_args().is_some_and(|n| n.min_values() > 0)
            {
                pending = Some(a);
            }
            continue;
        }
        if let Some(sub) = command.find_subcommand(word) {
            command = sub;
        }
    }
    let mut out: Vec<String> = if let Some(arg) = pending {
        values(arg, "", partial)
    } else if let Some((name, value)) = partial.split_once('=') {
        flag(command, name)
            .map(|a| values(a, &format!("{name}="), value))
            .unwrap_or_default()
    } else if partial.starts_with('-') {
        command
            .get_arguments()
            .filter(|a| !a.is_hide_set())
            .filter_map(|a| a.get_long().map(|l| (format!("--{l}"), help(a))))
            .filter(|(l, _)| l.starts_with(partial))
            .map(|(l, h)| format!("{l}\t{h}"))
            .collect()
    } else {
        let subcommands: Vec<String> = command
            .get_subcommands()
            .filter(|s| !s.is_hide_set() && s.get_name().starts_with(partial))
            .map(|s| {
                let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
                format!("{}\t{about}", s.get_name())
            })
            .collect();
        if subcommands.is_empty() {
            // Positional values with a fixed set (`completion bash|zsh`).
            command
                .get_positionals()
                .flat_map(|a| values(a, "", partial))
                .collect()
        } else {
            subcommands
        }
    };
    out.push(format!(":{NO_FILE_COMPLETION}"));
    let mut text = out.join("\n");
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        let mut w: Vec<String> = text.split(' ').map(String::from).collect();
        if text.is_empty() {
            w = vec![String::new()];
        }
        w
    }

    fn candidates(text: &str) -> Vec<String> {
        let out = complete(&words(text));
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.last(), Some(&":4"), "{out}");
        lines[..lines.len() - 1]
            .iter()
            .map(|l| l.split('\t').next().unwrap().to_string())
            .collect()
    }

    #[test]
    fn completes_commands_flags_and_values() {
        let all = candidates("");
        for c in ["status", "failover", "failback", "completion", "verify"] {
            assert!(all.contains(&c.to_string()), "{all:?}");
        }
        assert_eq!(candidates("fail"), ["failover", "failback"]);
        let flags = candidates("failover dr --");
        for f in [
            "--topic",
            "--all",
            "--immediate",
            "--dry-run",
            "--print-patch",
            "--as",
            "--request-timeout",
        ] {
            assert!(flags.contains(&f.to_string()), "{flags:?}");
        }
        assert_eq!(candidates("status -o "), ["table", "wide", "json", "yaml"]);
        assert_eq!(candidates("status --output=j"), ["--output=json"]);
        assert_eq!(
            candidates("failover dr --dry-run="),
            ["--dry-run=server", "--dry-run=client"]
        );
        assert_eq!(candidates("completion "), ["bash", "zsh"]);
        // A flag's value is not taken for a command: after `-n status` the command is still to
        // be chosen.
        assert_eq!(candidates("-n status st"), ["status"]);
        assert_eq!(candidates("status st"), Vec::<String>::new());
    }

    /// What bash completes for `kubectl-mirror WORDS…` with the generated script.
    fn bash_completes(words: &[&str]) -> Vec<String> {
        let dir =
            std::env::temp_dir().join(format!("kubectl-mirror-completion-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("completion.bash");
        std::fs::write(&file, script(Shell::Bash)).unwrap();
        let mut all = vec!["kubectl-mirror"];
        all.extend_from_slice(words);
        let quoted: Vec<String> = all.iter().map(|w| format!("'{w}'")).collect();
        let program = format!(
            "source '{}'; COMP_WORDS=({}); COMP_CWORD={}; _kubectl__mirror kubectl-mirror '{}' '{}'; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display(),
            quoted.join(" "),
            all.len() - 1,
            all[all.len() - 1],
            all[all.len() - 2],
        );
        let out = std::process::Command::new("bash")
            .args(["-c", &program])
            .output()
            .expect("run bash");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.is_empty())
            .map(String::from)
            .collect()
    }

    #[test]
    fn scripts_complete_the_program() {
        let bash = script(Shell::Bash);
        assert!(bash.contains("kubectl-mirror"), "{bash}");
        assert_eq!(bash_completes(&["fail"]), ["failover", "failback"]);
        assert!(bash_completes(&["failover", "dr", "--"]).contains(&"--print-patch".to_string()));
        assert_eq!(
            bash_completes(&["status", "-o", ""]),
            ["table", "wide", "json", "yaml"]
        );
        let zsh = script(Shell::Zsh);
        assert!(zsh.starts_with("#compdef kubectl-mirror"), "{zsh}");
        assert!(zsh.contains("--print-patch"), "{zsh}");
    }
}
