"""AD on XLand-MiniGrid (XLand-100B's AD baseline)."""
