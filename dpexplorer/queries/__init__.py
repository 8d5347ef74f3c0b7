"""Queries: implicit query matrices, workload builders, declarative workload specs.

==============  ==============================================================
``limits``      size limits checked before allocating (overridable), shared by
                every layer and the app
``matrix``      implicit query matrices (Identity, Prefix, AllRange, Kronecker,
                VStack, ...): products, Gram, sensitivity without materialising
``workloads``   workload builders (ranges, prefixes, marginals, unions, products)
``spec``        declarative JSON/YAML workload specs
==============  ==============================================================

The lowest layer: public linear algebra over the data domain; imports nothing
else from dpexplorer.
"""

from . import limits, matrix, spec, workloads
from .limits import LimitExceededError
from .matrix import Matrix, MatrixTooLargeError, as_matrix

__all__ = ["limits", "matrix", "spec", "workloads", "Matrix", "MatrixTooLargeError", "as_matrix",
           "LimitExceededError"]
