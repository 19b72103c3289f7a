import os
import sys

# the shared kernel corpus lives beside the test folders
sys.path.insert(0, os.path.dirname(__file__))
