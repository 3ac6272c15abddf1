"""``python -m spyrejax`` runs the main demo."""

from ._demo import main

main()
