//! Tool definitions serialized once per provider rather than once per request.
//!
//! An agent sends the same tools with every model call, and serializing a JSON Schema (a tree
//! of maps whose strings are escaped byte by byte) is the costly part of building a request.
//! A provider keeps each definition's wire form, keyed by the definition's `Arc`. The cache
//! holds a strong reference, so a definition cannot change behind its key: `Arc::get_mut`
//! fails while it is cached, and `Arc::make_mut` makes a new one.

use std::sync::{Arc, Mutex, PoisonError};

use serde_json::value::RawValue;

use crate::tool::FunctionDefinition;

/// Wire forms of the tool definitions a provider has sent, newest last.
#[derive(Debug, Default)]
pub(crate) struct RenderedTools {
    entries: Mutex<Vec<(Arc<FunctionDefinition>, Arc<RawValue>)>>,
}

impl RenderedTools {
    /// More distinct definitions than this (tools built per request, say) start the cache over:
    /// a bound on its memory, and on the scan that looks a definition up.
    const CAPACITY: usize = 64;

    /// `definition`'s wire form: cached, or made by `render` and cached.
    pub(crate) fn get(
        &self,
        definition: &Arc<FunctionDefinition>,
        render: impl FnOnce(&FunctionDefinition) -> serde_json::Result<Box<RawValue>>,
    ) -> serde_json::Result<Arc<RawValue>> {
        if let Some((_, rendered)) = self
            .lock()
            .iter()
            .find(|(cached, _)| Arc::ptr_eq(cached, definition))
        {
            return Ok(Arc::clone(rendered));
        }
        let rendered: Arc<RawValue> = render(definition)?.into();
        let mut entries = self.lock();
        if entries.len() >= Self::CAPACITY {
            entries.clear();
        }
        entries.push((Arc::clone(definition), Arc::clone(&rendered)));
        Ok(rendered)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(Arc<FunctionDefinition>, Arc<RawValue>)>> {
        // A poisoned lock only means a panic elsewhere; the entries are whole.
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn definition(name: &str) -> Arc<FunctionDefinition> {
        Arc::new(FunctionDefinition {
            name: name.to_owned(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
            strict: false,
        })
    }

    fn render(definition: &FunctionDefinition) -> serde_json::Result<Box<RawValue>> {
        serde_json::value::to_raw_value(&json!({"name": definition.name}))
    }

    #[test]
    fn a_definition_is_rendered_once_and_an_equal_copy_again() {
        let cache = RenderedTools::default();
        let weather = definition("weather");
        let mut renders = 0;
        for _ in 0..3 {
            let rendered = cache
                .get(&weather, |d| {
                    renders += 1;
                    render(d)
                })
                .unwrap();
            assert_eq!(rendered.get(), r#"{"name":"weather"}"#);
        }
        assert_eq!(renders, 1);

        // Keyed by the Arc, not the contents: a definition made again is rendered again.
        let again = definition("weather");
        cache
            .get(&again, |d| {
                renders += 1;
                render(d)
            })
            .unwrap();
        assert_eq!(renders, 2);
    }

    #[test]
    fn a_cached_definition_cannot_change_under_its_key() {
        let cache = RenderedTools::default();
        let mut weather = definition("weather");
        cache.get(&weather, render).unwrap();
        Arc::make_mut(&mut weather).name = "forecast".to_owned();
        let rendered = cache.get(&weather, render).unwrap();
        assert_eq!(rendered.get(), r#"{"name":"forecast"}"#);
    }

    #[test]
    fn the_cache_starts_over_past_its_capacity() {
        let cache = RenderedTools::default();
        let definitions: Vec<_> = (0..=RenderedTools::CAPACITY)
            .map(|i| definition(&format!("tool_{i}")))
            .collect();
        for d in &definitions {
            cache.get(d, render).unwrap();
        }
        assert_eq!(cache.lock().len(), 1);
    }
}
