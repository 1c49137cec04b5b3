"""Ayad and Naughton's static cost model and optimizer for conjunctive window queries (issue 17).

:mod:`.stats_file` reads the statistics, :mod:`.inputs` binds them to a query's plan,
:mod:`.shapes` enumerates plan shapes, :mod:`.model` costs one shape (Sect. 3), :mod:`.optimizer`
tests feasibility and chooses (Sect. 4) or approximates with drop boxes (Sect. 5), and
:mod:`.render` prints EXPLAIN.
"""
