"""omni-wan: Wan 2.1/2.2 text-to-video on omni-core (entry point ``wan``)."""
