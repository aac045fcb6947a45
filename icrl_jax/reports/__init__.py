"""Reports shared by several papers: seeds side by side, tables of config columns."""
