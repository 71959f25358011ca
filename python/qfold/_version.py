# The package's version: the library's (CMakeLists.txt, project(qfold VERSION ...)).
# The package refuses a library of another version (qfold._lib).
__version__ = "0.1.0"
