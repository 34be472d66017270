//! Name reservation: the kubelet relies on a second create with the same metadata failing.

use crate::error::{Error, Result};
use std::collections::HashMap;

#[derive(Debug, Default)]
pub struct NameIndex {
    owners: HashMap<String, String>,
}

impl NameIndex {
    /// Reserves `name` for `id`; AlreadyExists naming the current owner if taken.
    pub fn reserve(&mut self, name: &str, id: &str, what: &str) -> Result<()> {
        match self.owners.get(name) {
            Some(owner) if owner != id => Err(Error::already_exists(format!(
                "{what} name {name:?} is reserved for {owner}"
            ))),
            _ => {
                self.owners.insert(name.to_string(), id.to_string());
                Ok(())
            }
        }
    }

    /// Releases `name` if `id` holds it.
    pub fn release(&mut self, name: &str, id: &str) {
        if self.owners.get(name).is_some_and(|o| o == id) {
            self.owners.remove(name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_has_one_owner_until_released() {
        let mut n = NameIndex::default();
        n.reserve("a_ns_uid_0", "id1", "sandbox").unwrap();
        let err = n.reserve("a_ns_uid_0", "id2", "sandbox").unwrap_err();
        assert_eq!(err.code(), crate::error::Code::AlreadyExists);
        assert!(err.message().contains("id1"), "{err}");
        n.release("a_ns_uid_0", "id2");
        assert!(n.reserve("a_ns_uid_0", "id2", "sandbox").is_err());
        n.release("a_ns_uid_0", "id1");
        n.reserve("a_ns_uid_0", "id2", "sandbox").unwrap();
    }
}
