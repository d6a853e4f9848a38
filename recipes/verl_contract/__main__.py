import sys

from recipes.verl_contract import main

sys.exit(main(sys.argv[1:]))
