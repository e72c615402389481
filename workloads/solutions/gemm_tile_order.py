"""order="hilbert" of the GEMM template: the tiles walked along a generalized Hilbert curve (measured slower than
the grouped order on the H200: gemm_sweep.md)."""
from __future__ import annotations

# order="hilbert": tile_coords as a generalized Hilbert curve ("gilbert", any rectangle) walked from d to (x, y)
# without recursion (tests/workloads/test_gemm_solution.py compiles it for the host and walks every grid).
HILBERT_TILE_COORDS = r"""__device__ __forceinline__ int sgn_i(int v) { return (v > 0) - (v < 0); }

__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int& tm, int& tn) {
  // Hilbert order (fast.cu): a generalized Hilbert curve over the tiles_m x tiles_n grid, so each wave of
  // consecutive tiles covers a compact block of tile rows and columns and the next wave starts next to it.
  // The curve is split into halves or thirds (long side first) until the part holding `tile` is one
  // tile wide; (x, y) is that part's corner, (ax, ay) its major and (bx, by) its minor axis.
  int x = 0, y = 0, cur = 0, ax, ay, bx, by;
  if (tiles_m >= tiles_n) { ax = tiles_m; ay = 0; bx = 0; by = tiles_n; } else { ax = 0; ay = tiles_n; bx = tiles_m; by = 0; }
  while (true) {
    const int w = abs(ax + ay), h = abs(bx + by);
    const int dax = sgn_i(ax), day = sgn_i(ay), dbx = sgn_i(bx), dby = sgn_i(by);
    const int di = tile - cur;
    if (h == 1) { tm = x + dax * di; tn = y + day * di; return; }
    if (w == 1) { tm = x + dbx * di; tn = y + dby * di; return; }
    int ax2 = ax / 2, ay2 = ay / 2, bx2 = bx / 2, by2 = by / 2;  // truncation toward zero
    const int w2 = abs(ax2 + ay2), h2 = abs(bx2 + by2);
    if (2 * w > 3 * h) {  // long part: two halves along the major axis
      if ((w2 % 2) && w > 2) { ax2 += dax; ay2 += day; }
      const int nxt = cur + abs((ax2 + ay2) * (bx + by));
      if (tile < nxt) { ax = ax2; ay = ay2; }
      else { cur = nxt; x += ax2; y += ay2; ax -= ax2; ay -= ay2; }
      continue;
    }
    if ((h2 % 2) && h > 2) { bx2 += dbx; by2 += dby; }
    int nxt = cur + abs((bx2 + by2) * (ax2 + ay2));  // up
    if (tile < nxt) { const int tx = ax2, ty = ay2; ax = bx2; ay = by2; bx = tx; by = ty; continue; }
    cur = nxt;
    nxt = cur + abs((ax + ay) * ((bx + by) - (bx2 + by2)));  // across
    if (tile < nxt) { x += bx2; y += by2; bx -= bx2; by -= by2; continue; }
    cur = nxt;  // down
    const int nx = x + (ax - dax) + (bx2 - dbx), ny = y + (ay - day) + (by2 - dby);
    const int nax = -bx2, nay = -by2, nbx = -(ax - ax2), nby = -(ay - ay2);
    x = nx; y = ny; ax = nax; ay = nay; bx = nbx; by = nby;
  }
}
"""
