"""plotnine geoms of our own, for figures whose time goes into drawing many alike points.

``geom_cloud`` is ``geom_point`` for tens of thousands of points that share one size, stroke,
colour, fill, alpha and shape (a box plot's outliers: 45,000 in the population's
``self_delay``). plotnine hands matplotlib one size, line width and colour per point, and
matplotlib then builds a dash pattern and a colour per point, in Python, at every draw: about
two thirds of that figure's time (README "Re-analysis time"). Here plotnine styles one point,
and the collection it made is given every point's position: the same points in the same style
(tests/test_figures.py compares the collection with geom_point's). matplotlib draws a
collection of one style as markers, each at a whole pixel, as it draws any one-colour scatter
plot: the raster differs from geom_point's in anti-aliasing only (points moved by under a
pixel), and the population's self_delay takes 60 % of the time. Points that differ in any of those
aesthetics are drawn by geom_point as before.
"""

from __future__ import annotations

import numpy as np
from plotnine import geom_point

#: what must be the same for every point of a group to draw it as one styled collection
UNIFORM_AES = ("size", "stroke", "color", "fill", "alpha", "shape")


class geom_cloud(geom_point):
    """geom_point, drawn as one styled collection when its points share their style."""

    @staticmethod
    def draw_group(data, panel_params, coord, ax, params):
        cols = [c for c in UNIFORM_AES if c in data.columns]
        if len(data) < 2 or any(data[c].nunique(dropna=False) > 1 for c in cols):
            return geom_point.draw_group(data, panel_params, coord, ax, params)
        data = coord.transform(data, panel_params).reset_index(drop=True)
        before = len(ax.collections)
        geom_point.draw_unit(data.iloc[:1], panel_params, coord, ax, params)
        if len(ax.collections) != before + 1:  # plotnine drew it another way: draw all
            for c in list(ax.collections[before:]):
                c.remove()
            geom_point.draw_unit(data, panel_params, coord, ax, params)
            return None
        ax.collections[-1].set_offsets(
            np.column_stack([data["x"].to_numpy(float), data["y"].to_numpy(float)]))
        return None
