//! JSON paths (`$.chain[2].tries[0].kind`), built as a reader descends and written out only
//! when it refuses: the usual record is read without writing one.

use std::fmt::Write;

/// Where a value is: the root's own path, or a member or item of a value somewhere.
#[derive(Clone, Copy, Debug)]
pub enum Path<'p> {
    Root(&'p str),
    Member(&'p Path<'p>, &'p str),
    Index(&'p Path<'p>, usize),
}

impl Path<'_> {
    /// The path as text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Path::Root(root) => out.push_str(root),
            Path::Member(parent, name) => {
                parent.write(out);
                out.push('.');
                out.push_str(name);
            }
            Path::Index(parent, index) => {
                parent.write(out);
                let _ = write!(out, "[{index}]");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_members_and_items() {
        let root = Path::Root("$.chain[2]");
        let tries = Path::Member(&root, "tries");
        let first = Path::Index(&tries, 0);
        assert_eq!(
            Path::Member(&first, "kind").render(),
            "$.chain[2].tries[0].kind"
        );
    }
}
