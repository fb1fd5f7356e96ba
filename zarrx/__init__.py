"""zarrx: Zarr v3 for the dask/xarray world."""

__version__ = "0.1.0"
