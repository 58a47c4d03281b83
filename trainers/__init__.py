"""The methods, one module each (``coop``, ``petr``, ...), listed by ``trainers.catalog``; the parts they share live
in ``prompting``, ``routing`` and ``distillation``. Importing the package registers nothing: ``trainers.catalog``
registers the trainers on demand (``register_trainers()``)."""
