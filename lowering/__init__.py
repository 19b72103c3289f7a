"""The compiler: a frontend from Python AST to the tile IR, the IR itself, and one folder per backend."""
