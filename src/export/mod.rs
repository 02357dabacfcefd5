//! Parquet datasets: shards, manifest, atomic commit, dataset card.
