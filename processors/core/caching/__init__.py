"""A-Caching (Babu, Munagala, Widom, Motwani, ICDE 2005): caches of join subresults inside MJoin
pipelines, chosen by their measured benefit and cost under a memory budget.

The pure side lives here, without runtime wiring: the candidate caches of a set of pipelines
(``candidates``), the cost model and its online estimators (``model``, ``estimators``), the
offline selection algorithms (``selection``), memory allocation by priority (``allocation``)
and the adaptive re-selection of Sect. 4.5 (``adaptive``). See docs/caching.md.
"""
