//! Pictures of synthetic scenes (`capflow synth --render`): a sky-to-ground gradient and, for
//! every boxed entity, a filled shape in each of its boxes, coloured by its attribute when that
//! is a colour ("a red helmet" is red, whether or not a caption says so) and otherwise by its
//! phrase type; people, animals and body parts are ellipses, everything else rectangles with a
//! darker border; larger shapes are drawn first so that small objects stay visible. The same
//! drawing as `examples/data/tools/images.py` draws for the embedded sample, so that a model
//! that reads pixels can learn what the captions' colour words look like.

use image::{Rgb, RgbImage};

use super::{Entity, SynthImage};

/// The sRGB of a basic colour term (the embedded sample's palette).
pub fn colour(word: &str) -> Option<[u8; 3]> {
    Some(match word {
        "black" => [25, 25, 28],
        "white" => [238, 238, 232],
        "gray" | "grey" => [128, 128, 132],
        "red" => [200, 32, 30],
        "green" => [45, 150, 55],
        "blue" => [40, 72, 198],
        "yellow" => [238, 212, 45],
        "orange" => [238, 140, 25],
        "brown" => [122, 76, 38],
        "pink" => [238, 150, 178],
        "purple" => [120, 52, 148],
        "tan" => [208, 178, 138],
        _ => return None,
    })
}

/// The colour of an entity with no colour attribute: its phrase type's, shifted a little per
/// chain so that neighbours of one type stay apart.
fn type_colour(flickr_type: &str, chain: u64) -> [u8; 3] {
    let base: [u8; 3] = match flickr_type {
        "people" => [176, 116, 86],
        "clothing" => [92, 96, 150],
        "bodyparts" => [196, 150, 122],
        "animals" => [150, 104, 62],
        "vehicles" => [64, 96, 168],
        "instruments" => [164, 104, 44],
        _ => [214, 150, 70],
    };
    let shift = (chain * 37 % 41) as i32 - 20;
    base.map(|c| (i32::from(c) + shift).clamp(0, 255) as u8)
}

fn entity_colour(entity: &Entity) -> [u8; 3] {
    colour(entity.adjective).unwrap_or_else(|| type_colour(entity.kind.flickr_type, entity.chain))
}

/// The picture of `scene` at its annotated size.
pub fn render(scene: &SynthImage) -> RgbImage {
    let (width, height) = (scene.width, scene.height);
    let tint = (scene.image_id % 50) as f64;
    let sky = [150.0 + tint % 40.0, 185.0 + tint % 25.0, 225.0];
    let ground = [110.0 + tint, 140.0 + tint % 30.0, 90.0];
    let horizon = height * 45 / 100;
    let mut picture = RgbImage::from_fn(width, height, |_, y| {
        let (base, t, fade) = if y < horizon {
            (sky, f64::from(y) / f64::from(horizon.max(1)), 0.25)
        } else {
            (
                ground,
                f64::from(y - horizon) / f64::from((height - horizon).max(1)),
                0.3,
            )
        };
        Rgb(base.map(|c| (c * (1.0 - fade * t)) as u8))
    });
    // Flickr30k boxes are 1-based inclusive: pixel edges x1 = xmin - 1, x2 = xmax.
    let mut shapes: Vec<([u32; 4], [u8; 3], bool)> = scene
        .boxed_entities()
        .flat_map(|entity| {
            let rounded = matches!(entity.kind.flickr_type, "people" | "animals" | "bodyparts");
            let colour = entity_colour(entity);
            entity
                .boxes
                .iter()
                .map(move |b| ([b.xmin - 1, b.ymin - 1, b.xmax, b.ymax], colour, rounded))
        })
        .collect();
    shapes.sort_by_key(|(b, _, _)| std::cmp::Reverse((b[2] - b[0]) * (b[3] - b[1])));
    for ([x1, y1, x2, y2], colour, rounded) in shapes {
        let border = colour.map(|c| (u16::from(c) * 2 / 3) as u8);
        let (cx, cy) = (f64::from(x1 + x2) / 2.0, f64::from(y1 + y2) / 2.0);
        let rx = (f64::from(x2 - x1) / 2.0).max(1.0);
        let ry = (f64::from(y2 - y1) / 2.0).max(1.0);
        for y in y1..y2.min(height) {
            for x in x1..x2.min(width) {
                let edge = if rounded {
                    let dx = (f64::from(x) + 0.5 - cx) / rx;
                    let dy = (f64::from(y) + 0.5 - cy) / ry;
                    let r = dx * dx + dy * dy;
                    if r > 1.0 {
                        continue;
                    }
                    r > 0.85
                } else {
                    x - x1 < 2 || x2 - 1 - x < 2 || y - y1 < 2 || y2 - 1 - y < 2
                };
                picture.put_pixel(x, y, Rgb(if edge { border } else { colour }));
            }
        }
    }
    picture
}

/// [`render`] as PNG bytes.
pub fn render_png(scene: &SynthImage) -> Vec<u8> {
    let mut bytes = Vec::new();
    render(scene)
        .write_to(
            &mut std::io::Cursor::new(&mut bytes),
            image::ImageFormat::Png,
        )
        .expect("encoding an in-memory RGB image as PNG does not fail");
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synth::generate_image;

    #[test]
    fn every_box_centre_has_its_entity_colour_unless_a_smaller_box_covers_it() {
        let mut coloured = 0;
        for index in 0..40 {
            let scene = generate_image(3, index, 5);
            let picture = render(&scene);
            assert_eq!(picture.dimensions(), (scene.width, scene.height));
            let boxes: Vec<_> = scene
                .boxed_entities()
                .flat_map(|e| e.boxes.iter().map(move |b| (e, *b)))
                .collect();
            let area = |b: &super::super::FlickrBox| (b.xmax - b.xmin) * (b.ymax - b.ymin);
            for (k, &(entity, b)) in boxes.iter().enumerate() {
                let (x, y) = ((b.xmin - 1 + b.xmax) / 2, (b.ymin - 1 + b.ymax) / 2);
                // Drawn after it: a box no larger (pixel x lies in xmin - 1 .. xmax).
                let covered = boxes.iter().enumerate().any(|(j, (_, o))| {
                    j != k
                        && area(o) <= area(&b)
                        && o.xmin <= x + 1
                        && x < o.xmax
                        && o.ymin <= y + 1
                        && y < o.ymax
                });
                if covered || b.xmax - b.xmin < 6 || b.ymax - b.ymin < 6 {
                    continue;
                }
                assert_eq!(
                    picture.get_pixel(x, y).0,
                    entity_colour(entity),
                    "image {}: {} {:?}",
                    scene.image_id,
                    entity.adjective,
                    b
                );
                if colour(entity.adjective).is_some() {
                    coloured += 1;
                }
            }
        }
        assert!(coloured > 10, "{coloured} colour-attributed boxes checked");
    }

    #[test]
    fn colour_words_are_drawn_in_their_colour() {
        assert_eq!(colour("red"), Some([200, 32, 30]));
        assert_eq!(colour("grey"), colour("gray"));
        assert_eq!(colour("little"), None);
        // A type colour stays within 20 of its base.
        let c = type_colour("people", 7);
        assert!(c
            .iter()
            .zip([176u8, 116, 86])
            .all(|(a, b)| a.abs_diff(b) <= 20));
    }
}
