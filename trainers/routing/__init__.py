"""PETR's routing: the routers (``routers``), the routed trainers' component (``routed``), the routed evaluation
(``evaluation``), and a finished run's checkpoint as PETR+X's seen branch (``tuned``)."""
