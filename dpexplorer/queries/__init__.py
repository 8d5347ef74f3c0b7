"""Queries: implicit query matrices, workload builders, declarative workload specs.

==============  ==============================================================
``limits``      size limits checked before allocating (overridable), shared by
                every layer and the app
``matrix``      implicit query matrices (Identity, Prefix, AllRange, Kronecker,
                VStack, ...): products, Gram, sensitivity without materialising
``workloads``   workload builders (ranges, prefixes, marginals, unions, products)
``spec``        declarative JSON/YAML workload specs
``gram_ops``    fast products with range-workload Grams (no ``n × n`` matrix)
``intervals``   inverse Grams ``diag(d) + Σ γ_q u_q u_qᵀ`` with interval-supported
                ``u_q``: traces and interval-query variances
``trees``       tree strategies (H2, HB, GreedyH, Haar) with tree-form ``(AᵀA)⁻¹``
``toeplitz``    lower-triangular Toeplitz matrices (continual counting's factorisations):
                FFT products, power-series inverse, the square root of the prefix matrix
``drawing``     a matrix (or its Gram) as a heatmap array, block-averaged when large
``domain``      public schemas of record tables (categorical and binned
                attributes) and :class:`Table` (records over a domain)
==============  ==============================================================

The lowest layer: public linear algebra over the data domain; imports nothing
else from dpexplorer.
"""

from . import domain, drawing, gram_ops, intervals, limits, matrix, spec, toeplitz, trees, workloads
from .domain import Attribute, Domain, Table
from .limits import LimitExceededError
from .matrix import Matrix, MatrixTooLargeError, as_matrix

__all__ = ["domain", "Attribute", "Domain", "Table", "drawing", "gram_ops", "intervals", "limits", "matrix", "spec",
           "toeplitz", "trees", "workloads", "Matrix", "MatrixTooLargeError", "as_matrix", "LimitExceededError"]
