"""Published results (cited data files) and the code that scores gpuplan's predictions on them."""
