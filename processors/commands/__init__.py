"""The commands around the worker: loading a query, starting workers, publishing test data,
the demo and the Spark analysis. None of them runs inside a Faust worker; the worker itself is
:mod:`processors.runtime`."""
