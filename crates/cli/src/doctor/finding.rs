//! One finding of `quaver doctor`: all well, or a problem with its fix.

/// One thing found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// What it is about (`daemon`, `real-time`, `memory`, `cards`, …).
    pub topic: &'static str,
    /// What was found.
    pub text: String,
    /// The command (or edit) that fixes it, for a problem; `None` when all is well.
    pub fix: Option<String>,
}

impl Finding {
    /// A finding that needs nothing done.
    pub fn ok(topic: &'static str, text: impl Into<String>) -> Finding {
        Finding {
            topic,
            text: text.into(),
            fix: None,
        }
    }

    /// A problem and its fix.
    pub fn problem(
        topic: &'static str,
        text: impl Into<String>,
        fix: impl Into<String>,
    ) -> Finding {
        Finding {
            topic,
            text: text.into(),
            fix: Some(fix.into()),
        }
    }

    /// Whether it is a problem.
    pub fn is_problem(&self) -> bool {
        self.fix.is_some()
    }
}
