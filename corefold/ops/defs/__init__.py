"""Operator definitions, one module per family; every module defines its entries on import.

A new operator is a new module here (see docs/adding-an-operator.md)."""
