import sys

from testhosts.demo.story import main

sys.exit(main())
