//! Object ids: 64 lowercase hex characters, any unique prefix of which resolves.

use std::collections::BTreeSet;

/// Length of the prefix used for unix socket names (which must stay short); ids are kept
/// unique in their first `SHORT_LEN` characters, so the short form is unambiguous too.
pub const SHORT_LEN: usize = 20;

/// A fresh random id.
pub fn generate() -> String {
    let bytes: [u8; 32] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn short(id: &str) -> &str {
    &id[..SHORT_LEN.min(id.len())]
}

/// Every id of one kind, for prefix lookups.
#[derive(Debug, Default)]
pub struct IdIndex {
    ids: BTreeSet<String>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum Lookup {
    Found(String),
    NotFound,
    Ambiguous,
}

impl IdIndex {
    /// A new id not sharing its short form with any id in this index or in `others`.
    pub fn generate_unique(&self, others: &IdIndex) -> String {
        loop {
            let id = generate();
            let s = short(&id);
            if self.lookup(s) == Lookup::NotFound && others.lookup(s) == Lookup::NotFound {
                return id;
            }
        }
    }

    pub fn insert(&mut self, id: &str) {
        self.ids.insert(id.to_string());
    }

    pub fn remove(&mut self, id: &str) {
        self.ids.remove(id);
    }

    /// The full id for an id or a unique prefix of one.
    pub fn lookup(&self, prefix: &str) -> Lookup {
        if prefix.is_empty() {
            return Lookup::NotFound;
        }
        let mut matches = self
            .ids
            .range(prefix.to_string()..)
            .take_while(|id| id.starts_with(prefix));
        match (matches.next(), matches.next()) {
            (Some(id), None) => Lookup::Found(id.clone()),
            (Some(id), Some(_)) if id == prefix => Lookup::Found(id.clone()),
            (Some(_), Some(_)) => Lookup::Ambiguous,
            (None, _) => Lookup::NotFound,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_64_hex() {
        let id = generate();
        assert_eq!(id.len(), 64);
        assert!(id
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(id, generate());
    }

    #[test]
    fn prefixes_resolve_when_unique() {
        let mut idx = IdIndex::default();
        idx.insert("abc123");
        idx.insert("abd456");
        assert_eq!(idx.lookup("abc"), Lookup::Found("abc123".into()));
        assert_eq!(idx.lookup("ab"), Lookup::Ambiguous);
        assert_eq!(idx.lookup("abc123"), Lookup::Found("abc123".into()));
        assert_eq!(idx.lookup("x"), Lookup::NotFound);
        assert_eq!(idx.lookup(""), Lookup::NotFound);
        idx.remove("abd456");
        assert_eq!(idx.lookup("ab"), Lookup::Found("abc123".into()));
    }
}
