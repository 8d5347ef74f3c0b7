"""Queries: implicit query matrices, workload builders, declarative workload specs.

==============  ==============================================================
``matrix``      implicit query matrices (Identity, Prefix, AllRange, Kronecker,
                VStack, ...): products, Gram, sensitivity without materialising
``workloads``   workload builders (ranges, prefixes, marginals, unions, products)
``spec``        declarative JSON/YAML workload specs
==============  ==============================================================

The lowest layer: public linear algebra over the data domain; imports nothing
else from dpexplorer.
"""

from . import matrix, spec, workloads
from .matrix import Matrix, MatrixTooLargeError, as_matrix

__all__ = ["matrix", "spec", "workloads", "Matrix", "MatrixTooLargeError", "as_matrix"]
