//! What one listing may cost: at most so many items, so many bytes of them kept, and a
//! deadline, checked item by item as pages arrive (the page limit and the links are the
//! [`LinkGuard`](crate::http::service_link::LinkGuard)'s). Pure: the caller says what
//! each item weighs.

use crate::error::LinkFault;
use crate::keyvault::renewal::StoredProperties;

/// The default of [`StoreOptions::with_max_list_items`](crate::keyvault::store::StoreOptions::with_max_list_items).
pub const DEFAULT_MAX_LIST_ITEMS: usize = 100_000;

/// The default of [`StoreOptions::with_max_list_bytes`](crate::keyvault::store::StoreOptions::with_max_list_bytes): 64 MiB.
pub const DEFAULT_MAX_LIST_BYTES: usize = 64 * 1024 * 1024;

/// What a listing has taken so far, against its limits.
#[derive(Debug)]
pub(crate) struct ListingBudget {
    items: usize,
    bytes: usize,
    max_items: usize,
    max_bytes: usize,
}

impl ListingBudget {
    pub(crate) fn new(max_items: usize, max_bytes: usize) -> Self {
        ListingBudget {
            items: 0,
            bytes: 0,
            max_items: max_items.max(1),
            max_bytes: max_bytes.max(1),
        }
    }

    /// Take one more item of `weight` bytes, or say which limit it would pass.
    pub(crate) fn take(&mut self, weight: usize) -> Result<(), LinkFault> {
        if self.items >= self.max_items {
            return Err(LinkFault::TooManyItems {
                limit: self.max_items,
            });
        }
        let bytes = self.bytes.saturating_add(weight);
        if bytes > self.max_bytes {
            return Err(LinkFault::TooManyBytes {
                limit: self.max_bytes,
            });
        }
        self.items += 1;
        self.bytes = bytes;
        Ok(())
    }
}

/// Pure: about the bytes `properties` hold (its strings and a fixed part per field).
pub(crate) fn weight(properties: &StoredProperties) -> usize {
    const FIXED: usize = std::mem::size_of::<StoredProperties>();
    const PER_TAG: usize = 64;
    let tags: usize = properties
        .tags
        .iter()
        .map(|(k, v)| k.len() + v.len() + PER_TAG)
        .sum();
    FIXED + properties.name.len() + properties.version.as_ref().map_or(0, String::len) + tags
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_and_bytes_are_bounded() {
        let mut budget = ListingBudget::new(3, 1000);
        for _ in 0..3 {
            budget.take(100).unwrap();
        }
        assert_eq!(budget.take(1), Err(LinkFault::TooManyItems { limit: 3 }));
        let mut budget = ListingBudget::new(100, 1000);
        budget.take(600).unwrap();
        assert_eq!(
            budget.take(401),
            Err(LinkFault::TooManyBytes { limit: 1000 })
        );
        budget.take(400).unwrap();
    }

    #[test]
    fn weight_counts_names_and_tags() {
        let mut p = StoredProperties::new("uamsi-x");
        let bare = weight(&p);
        p.tags.insert("renew_after".into(), "v".repeat(1000));
        assert!(weight(&p) >= bare + 1011);
    }
}
