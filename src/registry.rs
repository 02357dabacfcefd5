//! A process-wide registry of named factories, each building an extension from its spec table:
//! the registered methods (`[methods.<name>]`, [`crate::augment::method`]) and sinks
//! (`[sinks.<name>]`, [`crate::dataflow::sink`]).

use std::collections::BTreeMap;
use std::sync::{Mutex, OnceLock};

use crate::error::{Error, Result};

/// Builds an extension from its spec table.
pub type Factory<T> = fn(config: &toml::Value) -> Result<T>;

/// Factories by name; `kind` ("method") and `table` ("methods") name them in errors.
pub struct Registry<T: 'static> {
    kind: &'static str,
    table: &'static str,
    factories: OnceLock<Mutex<BTreeMap<String, Factory<T>>>>,
}

impl<T> Registry<T> {
    pub const fn new(kind: &'static str, table: &'static str) -> Self {
        Registry {
            kind,
            table,
            factories: OnceLock::new(),
        }
    }

    fn factories(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Factory<T>>> {
        // A poisoned lock only means a registering thread panicked; the map itself is intact.
        self.factories
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Registers `factory` under `name`; registering the same factory again is a no-op, a
    /// different one under a taken name is an error.
    pub fn register(&self, name: &str, factory: Factory<T>) -> Result<()> {
        let mut factories = self.factories();
        match factories.get(name) {
            Some(existing) if *existing as usize != factory as usize => Err(Error::Usage(format!(
                "a different {} is already registered as `{name}`",
                self.kind
            ))),
            _ => {
                factories.insert(name.to_string(), factory);
                Ok(())
            }
        }
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.factories().keys().cloned().collect()
    }

    /// The extension registered as `name`, built from its `[<table>.<name>]` table.
    pub fn build(&self, name: &str, config: &toml::Value) -> Result<T> {
        let factory = self.factories().get(name).copied();
        match factory {
            // A factory's configuration errors are named by the table they come from.
            Some(factory) => factory(config).map_err(|err| match err {
                Error::Config(reason) => {
                    Error::Config(format!("[{}.{name}]: {reason}", self.table))
                }
                other => other,
            }),
            None => {
                let known = self.names();
                Err(Error::Config(format!(
                    "[{}.{name}]: no {} is registered as `{name}` ({})",
                    self.table,
                    self.kind,
                    if known.is_empty() {
                        "none is registered".to_string()
                    } else {
                        format!("registered: {}", known.join(", "))
                    }
                )))
            }
        }
    }
}
