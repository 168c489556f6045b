// Comparing packed bilevel pages (rows of width / 8 bytes, 1 = black, leftmost pixel in the high
// bit): how closely one page's black pixels follow another's. Used by the drawn cover's test and
// its benchmark, which compare the cover set from glyphs with PDFium's render of it as a PDF.

/** Share of `a`'s black pixels that have one of `b`'s at most one pixel away, and `a`'s count. */
export function nearShare(
  a: Uint8Array,
  b: Uint8Array,
  width: number,
  height: number,
): { share: number; black: number } {
  const rb = width >> 3;
  const bit = (r: Uint8Array, x: number, y: number) => (r[y * rb + (x >> 3)]! & (0x80 >> (x & 7))) !== 0;
  let black = 0;
  let found = 0;
  for (let y = 0; y < height; y++)
    for (let x = 0; x < width; x++) {
      if (!bit(a, x, y)) continue;
      black++;
      let hit = false;
      for (let dy = -1; dy <= 1 && !hit; dy++)
        for (let dx = -1; dx <= 1 && !hit; dx++) {
          const yy = y + dy;
          const xx = x + dx;
          hit = yy >= 0 && yy < height && xx >= 0 && xx < width && bit(b, xx, yy);
        }
      if (hit) found++;
    }
  return { share: black ? found / black : 1, black };
}
