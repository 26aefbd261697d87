//! `start-latency.png`: the distributions of pod start latency of both arms as empirical CDFs,
//! one panel per scenario (left G1 single pods, right G2 pods within the batches); kubelet (A)
//! blue, raw CRI (B) orange. x is milliseconds from 0, labelled under each vertical grid line
//! (digits drawn from a built-in 3×5 pixel font: no font library); y is the fraction of starts
//! done, with grid lines at quarters.

use std::{fs::File, io::BufWriter, path::Path};

use anyhow::{Context, Result};

/// Width and height of one panel, pixels.
const PANEL: (usize, usize) = (520, 360);
/// Margins inside a panel: left, right, top, bottom (room for the labels).
const MARGIN: (usize, usize, usize, usize) = (16, 16, 16, 30);
const WHITE: [u8; 3] = [255, 255, 255];
const GRID: [u8; 3] = [215, 215, 215];
const AXIS: [u8; 3] = [90, 90, 90];
/// Kubelet (A) and raw CRI (B).
const COLOURS: [[u8; 3]; 2] = [[31, 119, 180], [255, 127, 14]];

/// 3×5 digits, one row per `u8` (bit 2 = left column).
const DIGITS: [[u8; 5]; 10] = [
    [7, 5, 5, 5, 7],
    [2, 6, 2, 2, 7],
    [7, 1, 7, 4, 7],
    [7, 1, 7, 1, 7],
    [5, 5, 7, 1, 1],
    [7, 4, 7, 1, 7],
    [7, 4, 7, 5, 7],
    [7, 1, 1, 1, 1],
    [7, 5, 7, 5, 7],
    [7, 5, 7, 1, 7],
];

/// An RGB canvas.
struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: usize, height: usize) -> Canvas {
        Canvas {
            width,
            height,
            pixels: WHITE.repeat(width * height),
        }
    }

    fn set(&mut self, x: usize, y: usize, c: [u8; 3]) {
        if x < self.width && y < self.height {
            let i = (y * self.width + x) * 3;
            self.pixels[i..i + 3].copy_from_slice(&c);
        }
    }

    /// A horizontal or vertical segment, `thick` pixels wide.
    fn line(
        &mut self,
        (x0, y0): (usize, usize),
        (x1, y1): (usize, usize),
        c: [u8; 3],
        thick: usize,
    ) {
        for x in x0.min(x1)..=x0.max(x1) {
            for y in y0.min(y1)..=y0.max(y1) {
                for t in 0..thick {
                    if x0 == x1 {
                        self.set(x + t, y, c);
                    } else {
                        self.set(x, y + t, c);
                    }
                }
            }
        }
    }

    /// `n` in digits of `scale`-pixel dots, centred on `x`, top at `y`.
    fn number(&mut self, n: u64, x: usize, y: usize, scale: usize) {
        let text = n.to_string();
        let width = text.len() * 4 * scale;
        let left = x.saturating_sub(width / 2);
        for (i, d) in text.bytes().enumerate() {
            let glyph = DIGITS[usize::from(d - b'0')];
            for (row, bits) in glyph.iter().enumerate() {
                for col in 0..3 {
                    if bits & (4 >> col) != 0 {
                        for (dx, dy) in (0..scale).flat_map(|a| (0..scale).map(move |b| (a, b))) {
                            let px = left + (i * 4 + col) * scale + dx;
                            self.set(px, y + row * scale + dy, AXIS);
                        }
                    }
                }
            }
        }
    }
}

/// A round grid step giving about five lines up to `max`.
fn step(max: f64) -> f64 {
    let raw = (max / 5.0).max(1e-9);
    let magnitude = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude)
}

/// Draws one panel at horizontal offset `left`: the CDFs of `series` (A, B).
fn panel(canvas: &mut Canvas, left: usize, series: [&[f64]; 2]) {
    let (w, h) = PANEL;
    let (ml, mr, mt, mb) = MARGIN;
    let (x0, x1, y0, y1) = (left + ml, left + w - mr, mt, h - mb);
    let max = series
        .iter()
        .flat_map(|s| s.iter().copied())
        .fold(0.0, f64::max)
        .max(1.0);
    let grid = step(max);
    let top = (max / grid).ceil() * grid;
    let px = |ms: f64| x0 + ((ms / top) * (x1 - x0) as f64).round() as usize;
    let py = |f: f64| y1 - (f * (y1 - y0) as f64).round() as usize;
    for q in [0.25, 0.5, 0.75, 1.0] {
        canvas.line((x0, py(q)), (x1, py(q)), GRID, 1);
    }
    let mut tick = 0.0;
    while tick <= top + grid / 2.0 {
        canvas.line((px(tick), y0), (px(tick), y1), GRID, 1);
        canvas.number(tick.round() as u64, px(tick), y1 + 8, 2);
        tick += grid;
    }
    canvas.line((x0, y1), (x1, y1), AXIS, 1);
    canvas.line((x0, y0), (x0, y1), AXIS, 1);
    for (values, colour) in series.iter().zip(COLOURS) {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len() as f64;
        let mut at = (x0, py(0.0));
        for (i, v) in sorted.iter().enumerate() {
            let x = px(*v);
            let y = py((i + 1) as f64 / n);
            canvas.line(at, (x, at.1), colour, 2);
            canvas.line((x, at.1), (x, y), colour, 2);
            at = (x, y);
        }
        canvas.line(at, (x1, at.1), colour, 2);
    }
}

/// Writes the chart to `path`: G1 starts (`g1`: A, B) left, G2 per-pod starts (`g2`) right.
pub(crate) fn write(path: &Path, g1: [&[f64]; 2], g2: [&[f64]; 2]) -> Result<()> {
    let mut canvas = Canvas::new(PANEL.0 * 2, PANEL.1);
    panel(&mut canvas, 0, g1);
    panel(&mut canvas, PANEL.0, g2);
    let file = File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut encoder = png::Encoder::new(
        BufWriter::new(file),
        u32::try_from(canvas.width)?,
        u32::try_from(canvas.height)?,
    );
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header()?;
    writer.write_image_data(&canvas.pixels)?;
    writer.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_steps_are_round() {
        assert_eq!(step(180.0), 50.0);
        assert_eq!(step(9.0), 2.0);
        assert_eq!(step(12_000.0), 5000.0);
    }

    #[test]
    fn writes_a_png_with_both_curves() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("chart.png");
        let (a, b) = ([110.0, 120.0, 130.0], [100.0, 105.0, 140.0]);
        write(&path, [&a, &b], [&a, &b]).expect("write");
        let decoder = png::Decoder::new(std::io::BufReader::new(File::open(&path).expect("open")));
        let mut reader = decoder.read_info().expect("png header");
        let mut buf = vec![0; reader.output_buffer_size().expect("size")];
        let info = reader.next_frame(&mut buf).expect("frame");
        assert_eq!((info.width, info.height), (1040, 360));
        let has = |c: [u8; 3]| buf.chunks(3).any(|p| p == c);
        assert!(has(COLOURS[0]) && has(COLOURS[1]) && has(AXIS));
    }
}
