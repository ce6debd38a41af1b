import sys

from flexserv_ray.cli import main

sys.exit(main())
