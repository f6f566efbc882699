"""The closed primitive op set. Every module here defines ops; all are loaded on demand.

Add an op by adding a class (or a table row) to one of these modules, or a new module:
``disc_core.opdef`` imports every module of this package, so there is no list to update.
"""
