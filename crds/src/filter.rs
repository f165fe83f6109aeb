//! Compiled name filters: which source topics and consumer groups a mirror selects.

use regex::Regex;

use crate::v1alpha1::{NameFilter, TopicSelection};

/// A filter whose regular expression does not compile.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid regex {pattern:?} in {field}: {reason}")]
pub struct FilterError {
    /// Where the filter sits, e.g. `spec.topics.include[2]`.
    pub field: String,
    /// The offending pattern.
    pub pattern: String,
    /// What the regex parser said.
    pub reason: String,
}

/// One compiled filter.
#[derive(Debug, Clone)]
pub enum Matcher {
    /// Exact name.
    Name(String),
    /// Name prefix.
    Prefix(String),
    /// Anchored regular expression.
    Regex(Regex),
}

impl Matcher {
    /// Compiles a filter; `field` names it in errors.
    pub fn compile(filter: &NameFilter, field: &str) -> Result<Matcher, FilterError> {
        if let Some(name) = &filter.name {
            return Ok(Matcher::Name(name.clone()));
        }
        if let Some(prefix) = &filter.prefix {
            return Ok(Matcher::Prefix(prefix.clone()));
        }
        let pattern = filter.regex.clone().unwrap_or_default();
        Regex::new(&format!("^(?:{pattern})$"))
            .map(Matcher::Regex)
            .map_err(|e| FilterError {
                field: field.to_string(),
                pattern,
                reason: e
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or_default()
                    .trim()
                    .to_string(),
            })
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        match self {
            Matcher::Name(n) => n == name,
            Matcher::Prefix(p) => name.starts_with(p.as_str()),
            Matcher::Regex(r) => r.is_match(name),
        }
    }
}

/// Include/exclude filters, compiled. Exclude wins; names starting with `__` (internal topics
/// such as `__consumer_offsets` or the state topic) never match.
#[derive(Debug, Clone, Default)]
pub struct Selector {
    include: Vec<Matcher>,
    exclude: Vec<Matcher>,
    include_all_when_empty: bool,
}

impl Selector {
    /// Compiles include/exclude lists. With `include_all_when_empty`, an empty include list
    /// selects everything (group filters); otherwise it selects nothing (topic filters).
    pub fn compile(
        include: &[NameFilter],
        exclude: &[NameFilter],
        field: &str,
        include_all_when_empty: bool,
    ) -> Result<Selector, FilterError> {
        let compile_all = |filters: &[NameFilter], kind: &str| {
            filters
                .iter()
                .enumerate()
                .map(|(i, f)| Matcher::compile(f, &format!("{field}.{kind}[{i}]")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Selector {
            include: compile_all(include, "include")?,
            exclude: compile_all(exclude, "exclude")?,
            include_all_when_empty,
        })
    }

    /// The topic selection of a `ClusterMirror` (`spec.topics`).
    pub fn topics(selection: &TopicSelection) -> Result<Selector, FilterError> {
        Selector::compile(&selection.include, &selection.exclude, "spec.topics", false)
    }

    /// Whether `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        if name.starts_with("__") || self.exclude.iter().any(|m| m.matches(name)) {
            return false;
        }
        if self.include.is_empty() {
            return self.include_all_when_empty;
        }
        self.include.iter().any(|m| m.matches(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(n: &str) -> NameFilter {
        NameFilter {
            name: Some(n.into()),
            ..Default::default()
        }
    }
    fn prefix(p: &str) -> NameFilter {
        NameFilter {
            prefix: Some(p.into()),
            ..Default::default()
        }
    }
    fn regex(r: &str) -> NameFilter {
        NameFilter {
            regex: Some(r.into()),
            ..Default::default()
        }
    }

    #[test]
    fn include_exclude_and_internal_topics() {
        let s = Selector::compile(
            &[prefix("orders."), name("payments"), regex("audit-[0-9]+")],
            &[regex(".*\\.tmp"), name("orders.secret")],
            "spec.topics",
            false,
        )
        .unwrap();
        assert!(s.matches("orders.eu"));
        assert!(s.matches("payments"));
        assert!(s.matches("audit-42"));
        assert!(!s.matches("audit-42x"), "regex is anchored");
        assert!(!s.matches("xaudit-42"), "regex is anchored");
        assert!(!s.matches("orders.eu.tmp"), "exclude wins");
        assert!(!s.matches("orders.secret"));
        assert!(!s.matches("payments2"));
        assert!(!s.matches("__kmirror_state"));
    }

    #[test]
    fn empty_include_selects_nothing_for_topics_and_everything_for_groups() {
        let topics = Selector::compile(&[], &[], "spec.topics", false).unwrap();
        assert!(!topics.matches("anything"));
        let groups = Selector::compile(&[], &[prefix("tmp-")], "g", true).unwrap();
        assert!(groups.matches("billing"));
        assert!(!groups.matches("tmp-1"));
    }

    #[test]
    fn bad_regex_names_the_field() {
        let err = Selector::compile(&[regex("orders.(")], &[], "spec.topics", false).unwrap_err();
        assert_eq!(err.field, "spec.topics.include[0]");
        assert_eq!(err.pattern, "orders.(");
        assert!(err.to_string().contains("invalid regex"), "{err}");
    }
}
