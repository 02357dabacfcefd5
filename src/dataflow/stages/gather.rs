//! Stage `gather`: every record of an image, from every input, into one per-image state.

use std::sync::Arc;

use differential_dataflow::VecCollection;

use super::{Images, SsaImage, StageCount, StageMeter};
use crate::augment::ImageAnnotations;
use crate::dataflow::record::{ImageRecord, Staged};

/// Groups records by image key; the records of an image arrive in read order.
pub fn gather<'scope>(
    records: VecCollection<'scope, u64, (String, ImageRecord), isize>,
    meter: StageMeter,
) -> Images<'scope> {
    records
        .reduce(move |image_id, records, output| {
            let state = meter.measure(|| {
                let mut image = ImageAnnotations::new(image_id.as_str());
                for (record, _) in records.iter().filter(|(_, diff)| *diff > 0) {
                    image.push(record.0.row.clone());
                }
                let count = StageCount::new(records.len(), 1, 0);
                let state = SsaImage {
                    image: Arc::new(image),
                    ..Default::default()
                };
                (state, count)
            });
            output.push((
                Staged {
                    image_id: image_id.clone(),
                    value: state,
                },
                1,
            ));
        })
        .map(|(_, staged)| staged)
}
