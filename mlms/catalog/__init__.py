"""Which models exist and how a name resolves to a manifest (the schema: ``mlms.manifest``).

    zoo.py             the zoo: the manifests under ``models/`` and the rows of ``tables/``
                       (one family of models a file, as data); the label files of ``labels/``
    library_models.py  every architecture timm and torchvision register, as ``timm:NAME`` and
                       ``torchvision:NAME``
    hub.py             Hugging Face Hub ids (``hf:ORG/NAME``), fetched once into ``$MLMS_HOME/hub``
    resolve.py         the one way to find a model by what a user typed: a zoo or library name, an
                       added model, a model file or folder, a Hub id

An added model or a file is read through ``mlms.assets`` (its format, signature and stored
manifest), so this package sits above it.
"""
