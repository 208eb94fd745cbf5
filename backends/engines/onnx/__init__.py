"""ONNX Runtime: our own export (`export`), built in a child process (`build`), cached, and run (`engine`)."""
