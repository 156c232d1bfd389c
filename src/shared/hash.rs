//! The hash maps every stage uses.

/// emberd's hash maps: ahash (randomly keyed, so crafted symbol names
/// cannot flood a bucket) instead of SipHash, which took a quarter of the
/// collector's time interning every frame of every drained sample.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, ahash::RandomState>;
/// Hash sets of the same kind as [`FastMap`].
pub(crate) type FastSet<T> = std::collections::HashSet<T, ahash::RandomState>;
