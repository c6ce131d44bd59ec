"""`tango run --parallelism N`: the step graph run by N warm slot processes (:mod:`.scheduler`,
:mod:`.slot`), the node shared between them (:mod:`.sizing`)."""
