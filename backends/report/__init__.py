"""Reports: chart data (`figures`, Qt-free), pyqtgraph rendering (`plots`, the one module here that may use
pyqtgraph) and the self-contained HTML page (`html`)."""
