"""A worked example of a model of one's own: a reverse proxy's access log (``access_log.avsc``,
its model ``access_log.yml``) and a seeded producer of it, used by the tests, ``make bench
MODEL=access`` and README's "Your own events"."""
