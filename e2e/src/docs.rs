//! The copyable blocks of the docs, read as a user's shell and kubectl would read them: fenced
//! code blocks of markdown, shell commands with heredocs and continuation lines, YAML streams.

use serde::Deserialize;
use serde_json::Value;

/// Put on the line before a fenced block that is deliberately not a complete manifest/command.
pub const SKIP_MARKER: &str = "<!-- docs-test: skip";

/// A fenced code block of a markdown file.
#[derive(Debug)]
pub struct Block {
    pub origin: String,
    pub lang: String,
    pub text: String,
}

/// The fenced blocks of a markdown text, without those marked [`SKIP_MARKER`]. An unclosed fence
/// is an error (it would hide the rest of the file).
pub fn markdown_blocks(file: &str, markdown: &str) -> Result<Vec<Block>, String> {
    let mut blocks = Vec::new();
    let lines: Vec<&str> = markdown.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let trimmed = line.trim_start();
        if let Some(lang) = trimmed.strip_prefix("```") {
            let indent = line.len() - trimmed.len();
            let start = i;
            let mut body = Vec::new();
            i += 1;
            loop {
                let Some(l) = lines.get(i) else {
                    return Err(format!("{file}:{}: unclosed code fence", start + 1));
                };
                if l.trim() == "```" {
                    break;
                }
                body.push(l.get(indent..).unwrap_or(l.trim_start()));
                i += 1;
            }
            let skipped = lines[..start]
                .iter()
                .rev()
                .find(|l| !l.trim().is_empty())
                .is_some_and(|l| l.contains(SKIP_MARKER));
            if !skipped {
                blocks.push(Block {
                    origin: format!("{file}:{}", start + 1),
                    lang: lang.trim().to_string(),
                    text: body.join("\n") + "\n",
                });
            }
        }
        i += 1;
    }
    Ok(blocks)
}

/// Splits a shell line into words as a POSIX shell would (quotes, backslashes, `#` comments);
/// None when a quote is not closed.
pub fn words(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '#' if !in_word => break,
            '\'' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '\'' => break,
                        ch => word.push(ch),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => word.push(chars.next()?),
                        ch => word.push(ch),
                    }
                }
            }
            '\\' => {
                in_word = true;
                if let Some(ch) = chars.next() {
                    word.push(ch);
                }
            }
            ch => {
                in_word = true;
                word.push(ch);
            }
        }
    }
    if in_word {
        out.push(word);
    }
    Some(out)
}

/// One simple command of a shell text: its words and what a heredoc feeds it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShellCommand {
    pub origin: String,
    pub argv: Vec<String>,
    pub stdin: Option<String>,
}

/// The commands of a shell text (continuation lines joined, heredocs read as bash reads them:
/// the terminator alone on its line, at its start). Pipelines `cat <<X | cmd` give `cmd` the
/// heredoc. Lines that are not shell (prose in NOTES) come out as commands nobody runs. The
/// second list says what bash would trip over: a heredoc whose terminator is indented is
/// reported and then read up to that line anyway, so that what follows is checked too.
pub fn shell_commands(origin: &str, script: &str) -> (Vec<ShellCommand>, Vec<String>) {
    let lines: Vec<&str> = script.lines().collect();
    let mut out = Vec::new();
    let mut problems = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let first = i;
        let mut line = lines[i].to_string();
        while line.ends_with('\\') && i + 1 < lines.len() {
            line.pop();
            i += 1;
            line.push_str(lines[i]);
        }
        i += 1;
        let Some(argv) = words(&line) else { continue };
        let mut heredoc = None;
        let mut rest = Vec::new();
        let mut iter = argv.into_iter();
        while let Some(w) = iter.next() {
            if let Some(tag) = w.strip_prefix("<<") {
                let (strip_tabs, tag) = match tag.strip_prefix('-') {
                    Some(t) => (true, t.to_string()),
                    None => (false, tag.to_string()),
                };
                let tag = if tag.is_empty() {
                    iter.next().unwrap_or_default()
                } else {
                    tag
                };
                heredoc = Some((strip_tabs, tag));
            } else {
                rest.push(w);
            }
        }
        let stdin = match heredoc {
            None => None,
            Some((strip_tabs, tag)) => {
                let is_end = |l: &str| {
                    let l = if strip_tabs {
                        l.trim_start_matches('\t')
                    } else {
                        l
                    };
                    l == tag
                };
                let end = match lines[i..].iter().position(|l| is_end(l)) {
                    Some(n) => i + n,
                    None => {
                        problems.push(format!(
                            "{origin} line {}: the heredoc <<{tag} is never closed: bash ends it \
                             only at a line that is exactly `{tag}` (not indented)",
                            first + 1
                        ));
                        match lines[i..].iter().position(|l| l.trim() == tag) {
                            Some(n) => i + n,
                            None => return (out, problems),
                        }
                    }
                };
                let body: String = lines[i..end]
                    .iter()
                    .map(|l| {
                        let l = if strip_tabs {
                            l.trim_start_matches('\t')
                        } else {
                            l
                        };
                        format!("{l}\n")
                    })
                    .collect();
                i = end + 1;
                Some(body)
            }
        };
        // Pipelines: only `cat <<X | cmd` passes input on.
        let mut segments: Vec<Vec<String>> = vec![Vec::new()];
        for w in rest {
            if w == "|" {
                segments.push(Vec::new());
            } else {
                segments.last_mut().unwrap().push(w);
            }
        }
        let at = format!("{origin} line {}", first + 1);
        match segments.as_slice() {
            [only] if !only.is_empty() => out.push(ShellCommand {
                origin: at,
                argv: only.clone(),
                stdin,
            }),
            [cat, cmd] if cat.first().is_some_and(|c| c == "cat") && cat.len() == 1 => {
                out.push(ShellCommand {
                    origin: at,
                    argv: cmd.clone(),
                    stdin,
                })
            }
            _ => {}
        }
    }
    (out, problems)
}

/// The value of a flag (`-n X`, `--namespace X`, `--namespace=X`) of a command.
pub fn flag_value<'a>(argv: &'a [String], short: Option<&str>, long: &str) -> Option<&'a str> {
    for (i, a) in argv.iter().enumerate() {
        if Some(a.as_str()) == short || a == long {
            return argv.get(i + 1).map(String::as_str);
        }
        if let Some(v) = a.strip_prefix(&format!("{long}=")) {
            return Some(v);
        }
    }
    None
}

/// kubectl's verb: the first word that is neither a flag nor a flag's value.
pub fn kubectl_verb(argv: &[String]) -> Option<&str> {
    let with_value = [
        "-n",
        "--namespace",
        "--context",
        "--kubeconfig",
        "--cluster",
        "--user",
    ];
    let mut i = 1;
    while i < argv.len() {
        let a = argv[i].as_str();
        if with_value.contains(&a) {
            i += 2;
        } else if a.starts_with('-') {
            i += 1;
        } else {
            return Some(a);
        }
    }
    None
}

/// Parses a YAML stream into its non-empty documents.
pub fn yaml_documents(text: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v = Value::deserialize(doc).map_err(|e| e.to_string())?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// The NOTES part of `helm install` output.
pub fn notes_of(helm_output: &str) -> Option<&str> {
    helm_output.split_once("\nNOTES:\n").map(|(_, notes)| notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extraction_reads_shell_as_bash_does() {
        let (cmds, problems) = shell_commands(
            "t",
            "kubectl -n kmirror create secret generic s \\\n  --from-literal=password='a b' # why\n\
             cat <<'YAML' | kubectl apply -f -\nkind: X\n  YAML\nYAML\nhelm install x y\n",
        );
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(cmds.len(), 3, "{cmds:?}");
        assert_eq!(
            cmds[0].argv,
            [
                "kubectl",
                "-n",
                "kmirror",
                "create",
                "secret",
                "generic",
                "s",
                "--from-literal=password=a b"
            ]
        );
        assert_eq!(kubectl_verb(&cmds[0].argv), Some("create"));
        assert_eq!(
            flag_value(&cmds[0].argv, Some("-n"), "--namespace"),
            Some("kmirror")
        );
        assert_eq!(cmds[1].argv, ["kubectl", "apply", "-f", "-"]);
        assert_eq!(cmds[1].stdin.as_deref(), Some("kind: X\n  YAML\n"));
        assert_eq!(cmds[2].argv, ["helm", "install", "x", "y"]);
        // An indented terminator does not end a heredoc in bash.
        let (cmds, problems) = shell_commands(
            "t",
            "  cat <<'YAML' | kubectl apply -f -\n  kind: X\n  YAML\n  ls\n",
        );
        assert!(problems[0].contains("never closed"), "{problems:?}");
        assert_eq!(
            cmds.len(),
            2,
            "read on after the indented terminator: {cmds:?}"
        );
        assert_eq!(cmds[0].stdin.as_deref(), Some("  kind: X\n"));

        let blocks = markdown_blocks(
            "f.md",
            "a\n```sh\nls\n```\n<!-- docs-test: skip (a fragment) -->\n```yaml\nspec: {}\n```\n  ```yaml\n  kind: A\n  ```\n",
        )
        .unwrap();
        assert_eq!(blocks.len(), 2, "{blocks:?}");
        assert_eq!(blocks[1].text, "kind: A\n");
        assert!(markdown_blocks("f.md", "```sh\nls\n").is_err());
    }
}
