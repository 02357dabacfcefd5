//! Work shared between threads with its results kept in order.

/// `f` of every item, in the items' order, computed on up to as many threads as the machine
/// has cores (one item at a time per thread, the next free thread taking the next item).
pub(crate) fn parallel_map<T: Copy + Sync, R: Send>(
    items: &[T],
    f: impl Fn(T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(|&item| f(item)).collect();
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let results: Vec<std::sync::Mutex<Option<R>>> =
        items.iter().map(|_| std::sync::Mutex::new(None)).collect();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(&item) = items.get(i) else {
                    break;
                };
                let result = f(item);
                *results[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
            });
        }
    });
    results
        .into_iter()
        .map(|slot| {
            slot.into_inner()
                .unwrap_or_else(|e| e.into_inner())
                .expect("every item was mapped")
        })
        .collect()
}
